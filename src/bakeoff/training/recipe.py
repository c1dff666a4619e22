"""Training recipes: the model, the data, the optimizer, the global batch, how long,
and the target. Built-in: `builtin:digits-train`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bakeoff.errors import UserError
from bakeoff.stacks import NAMES


@dataclass(frozen=True)
class Recipe:
    name: str
    factory: str  # "module:function" building the untrained model
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    loss: str
    optimizer: str
    lr: float
    batch_size: int  # global
    max_steps: int
    eval_every: int
    target_metric: str
    target: float
    stacks: tuple[str, ...]
    tolerance: float = 0.01  # final metric more than this below the reference's: flagged


BUILTINS = ("digits-train",)


def load_recipe(ref: str, quick: bool) -> Recipe:
    """A built-in recipe by name (`builtin:digits-train`)."""
    name = ref.removeprefix("builtin:")
    if not ref.startswith("builtin:") or name not in BUILTINS:
        raise UserError(
            f"{ref}: no such training recipe (built in: "
            + ", ".join(f"builtin:{b}" for b in BUILTINS)
            + "; recipes from a TOML file's [train] section are not supported yet)"
        )
    from bakeoff.builtins import digits

    x_train, y_train, x_val, y_val = digits.train_and_validation()
    return Recipe(
        name=name,
        factory="bakeoff.builtins.digits:untrained",
        x_train=x_train,
        y_train=y_train,
        x_val=x_val,
        y_val=y_val,
        loss="cross-entropy",
        optimizer="adam",
        lr=2e-3,
        batch_size=64,
        max_steps=200 if quick else 400,
        eval_every=20,
        target_metric="accuracy",
        target=0.95,
        stacks=NAMES,
    )
