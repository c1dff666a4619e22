"""The digits recipe cut to 60 steps (an evaluation every 20), for the training tests
that run whole stacks: enough for the seeds' curves, checkpoints and parity to be
checked, at a third of the built-in's steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bakeoff import api

SHORT_RECIPE = """
name = "digits-short"
[model]
kind = "torch"
factory = "bakeoff.builtins.digits:untrained"
[train]
data = "builtin:digits"
lr = 0.002
batch_size = 64
steps = 60
eval_every = 20
target = { metric = "accuracy", value = 0.8 }
tolerance = 0.05
"""


def short_run(root: Path, stacks: tuple[str, ...]) -> dict:
    """One seed of the short recipe on `stacks`, 2 threads, a 5 s rounds budget."""
    recipe = root / "recipe.toml"
    recipe.write_text(SHORT_RECIPE)
    options = api.TrainOptions(
        stacks=stacks, seeds=1, quick=True, threads=2, budget_s=5, store=root / "s.db"
    )
    return api.train(str(recipe), options).document


def trains_like_the_reference(mine: dict, ref: dict) -> None:
    """The same initial weights, data order and optimizer: the same losses to float
    rounding at first (the first-loss gate held them to the reference's already),
    and the same accuracy at the end within what summation order leaves."""
    (seed,), (ref_seed,) = mine["seeds"], ref["seeds"]
    assert not seed["diverged"] and seed["steps"] == ref_seed["steps"]
    assert np.allclose(seed["losses"][:5], ref_seed["losses"][:5], rtol=1e-3)
    assert seed["final_metric"] == pytest.approx(ref_seed["final_metric"], abs=0.05)
