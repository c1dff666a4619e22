"""Training recipes: the model, the data, the optimizer, the global batch, how long,
and the target. Built-in: `builtin:digits-train`; or a workload TOML's `[train]`
section with `[model] kind = "torch"` and the factory of the untrained model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.errors import UserError, did_you_mean
from bakeoff.stacks import DEFAULT_STACKS, FINE_TUNING, NAMES, REFERENCE
from bakeoff.user_files import read_npz
from bakeoff.workload import parse_spec_file
from bakeoff.workload.spec import resolve_path


@dataclass(frozen=True)
class Recipe:
    name: str
    factory: str  # "module:function" building the untrained model
    factory_dir: str  # where the factory's module is found ("" for ours)
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
    reference: str = REFERENCE  # the stack the others are held to
    lora: LoraSettings | None = None  # the lora stack's adapters
    stack_lr: dict[str, float] = field(default_factory=dict)  # a stack's own learning rate
    tokens_per_row: float | None = None  # text: real tokens per example (tokens/s)
    data: str = ""  # what the data is, in words
    schedule: str = "constant"  # the learning rate over the steps (stacks.schedule)
    warmup_steps: int = 0

    def lr_of(self, stack: str) -> float:
        return self.stack_lr.get(stack, self.lr)


@dataclass(frozen=True)
class LoraSettings:
    targets: tuple[str, ...]  # the modules that get adapters
    rank: int = 8
    alpha: float = 16.0
    train: tuple[str, ...] = ()  # modules trained in full beside them (a head)


def reference_of(names: tuple[str, ...]) -> str:
    """The reference stack among those run: eager PyTorch, or full fine-tuning where
    the run compares fine-tuning methods."""
    if REFERENCE not in names and "full" in names:
        return "full"
    return REFERENCE


BUILTINS = ("digits-train", "minilm-finetune")


DATA_KEYS = ("x_train", "y_train", "x_val", "y_val")


def load_recipe(ref: str, quick: bool) -> Recipe:
    """A built-in recipe (`builtin:digits-train`) or a workload TOML with [train]."""
    if ref.startswith("builtin:"):
        return _builtin(ref, quick)
    path = Path(ref)
    if not path.is_file():
        raise UserError(
            f"{ref}: no such training recipe (a .toml file with [train], or {_BUILT_IN})"
        )
    spec = parse_spec_file(path)
    if spec.train is None:
        raise UserError(f"{path}: no [train] section: this is an inference workload (bakeoff run)")
    t = spec.train
    if spec.model.kind != "torch" or not spec.model.factory:
        raise UserError(
            f'{path}: [model] kind = "torch" with factory = "module:callable" (the untrained '
            f"model) is what the training stacks build so far, not kind = {spec.model.kind!r}"
        )
    base = path.resolve().parent
    arrays = _data(t.data, base, str(path))
    lora = (
        None
        if t.lora is None
        else LoraSettings(tuple(t.lora.targets), t.lora.rank, t.lora.alpha, tuple(t.lora.train))
    )
    unknown = sorted(set(t.stack_lr) - set(NAMES))
    if unknown:
        raise UserError(
            f"{path}: train.stack_lr: no training stack {unknown[0]!r}"
            f"{did_you_mean(unknown[0], NAMES)} (stacks: {', '.join(NAMES)})"
        )
    default = DEFAULT_STACKS + (("lora",) if lora else ())
    names = tuple(t.stacks) if t.stacks else default
    return Recipe(
        name=spec.name,
        factory=spec.model.factory,
        factory_dir=str(base),
        x_train=arrays["x_train"],
        y_train=arrays["y_train"],
        x_val=arrays["x_val"],
        y_val=arrays["y_val"],
        loss=t.loss,
        optimizer=t.optimizer,
        lr=t.lr,
        batch_size=t.batch_size,
        max_steps=t.steps,
        eval_every=t.eval_every,
        target_metric=t.target.metric,
        target=t.target.value,
        stacks=names,
        tolerance=t.tolerance,
        reference=reference_of(names),
        lora=lora,
        stack_lr=dict(t.stack_lr),
        data=t.data,
        schedule=t.schedule,
        warmup_steps=t.warmup_steps,
    )


_BUILT_IN = ", ".join(f"builtin:{b}" for b in BUILTINS)


def _data(ref: str, base: Path, origin: str) -> dict[str, np.ndarray]:
    key = f"{origin}: train.data = {ref!r}"
    if ref == "builtin:digits":
        from bakeoff.builtins import digits

        return dict(zip(DATA_KEYS, digits.train_and_validation(), strict=True))
    file = resolve_path(str(base), ref)
    if not file.is_file():
        raise UserError(f"{key}: {file} does not exist")
    data = read_npz(file, f"{key} ({file})")
    missing = [k for k in DATA_KEYS if k not in data]
    if missing:
        has = ", ".join(data) or "nothing"
        raise UserError(f"{key}: no {', '.join(missing)} in it (it has {has})")
    arrays = {k: data[k] for k in DATA_KEYS}
    for name, array in arrays.items():
        # a row per example on axis 0, of numbers the stacks cast (labels to class ids)
        if array.ndim == 0 or array.dtype.kind not in "biuf":
            raise UserError(
                f"{key}: {name} must be an array of numbers with a row per example, got "
                f"dtype {array.dtype}, shape {array.shape}"
            )
    for x, y in (("x_train", "y_train"), ("x_val", "y_val")):
        if len(arrays[x]) != len(arrays[y]):
            raise UserError(f"{key}: {x} has {len(arrays[x])} rows but {y} {len(arrays[y])}")
    for x in ("x_train", "x_val"):
        # Integers stay integers (token ids); anything else is FP32, as every stack takes it.
        integer = np.issubdtype(arrays[x].dtype, np.integer)
        arrays[x] = arrays[x].astype(np.int64 if integer else np.float32)
    arrays["y_train"] = arrays["y_train"].astype(np.int64)
    arrays["y_val"] = arrays["y_val"].astype(np.int64)
    return arrays


def _builtin(ref: str, quick: bool) -> Recipe:
    name = ref.removeprefix("builtin:")
    if name not in BUILTINS:
        raise UserError(f"{ref}: no such training recipe (built in: {_BUILT_IN})")
    if name == "minilm-finetune":
        return _minilm(quick)
    from bakeoff.builtins import digits

    return _builtin_recipe(
        name,
        "digits",
        digits.train_and_validation(),
        lr=2e-3,
        batch_size=64,
        max_steps=200 if quick else 400,
        target=0.95,
        stacks=DEFAULT_STACKS,
        data="scikit-learn's digits (8x8 images, 10 classes)",
    )


def _minilm(quick: bool) -> Recipe:
    """Full fine-tuning against LoRA on all-MiniLM-L6-v2 (see
    `bakeoff.builtins.minilm_finetune` for the data). LoRA trains with a learning
    rate 4x full fine-tuning's, as adapters usually do (both from PyTorch's Adam)."""
    from bakeoff.builtins import minilm_finetune as m

    arrays = m.train_and_validation()
    return _builtin_recipe(
        "minilm-finetune",
        "minilm_finetune",
        arrays,
        lr=5e-4,
        batch_size=16,
        max_steps=80 if quick else 120,
        target=0.72,
        stacks=FINE_TUNING,
        # 256 validation examples: one example is 0.4 points and the accuracy's
        # standard error about 2.7, so a drop under 5 points is no evidence.
        tolerance=0.05,
        reference="full",
        lora=LoraSettings(targets=("query", "value"), rank=8, alpha=16.0, train=("head",)),
        stack_lr={"lora": 2e-3},
        tokens_per_row=m.tokens_per_row(arrays[0]),  # of x_train
        data=f"docstrings of the Python standard library labelled by package "
        f"({', '.join(m.PACKAGES)}), at most {m.MAX_TOKENS} tokens",
    )


def _builtin_recipe(
    name: str,
    module: str,
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    **settings: Any,
) -> Recipe:
    """A built-in recipe: the untrained model of `bakeoff.builtins.<module>` on its
    (x_train, y_train, x_val, y_val), trained as every built-in is (cross-entropy, Adam,
    accuracy checked every 20 steps); `settings` holds the rest of its Recipe fields."""
    x_train, y_train, x_val, y_val = arrays
    return Recipe(
        name=name,
        factory=f"bakeoff.builtins.{module}:untrained",
        factory_dir="",
        x_train=x_train,
        y_train=y_train,
        x_val=x_val,
        y_val=y_val,
        loss="cross-entropy",
        optimizer="adam",
        eval_every=20,
        target_metric="accuracy",
        **settings,
    )
