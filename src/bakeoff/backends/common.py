"""Helpers shared by backends, as functions (no base classes)."""

from __future__ import annotations

from typing import Any

import numpy as np

from bakeoff.backends import BuildContext


def calibration_data(ctx: BuildContext) -> dict[str, np.ndarray]:
    """Calibration split of the workload's own data (never the quality hold-out)."""
    with np.load(ctx.data_path, allow_pickle=False) as z:
        return {n: z[f"calib/{n}"] for n in ctx.input_names}


def example_inputs(ctx: BuildContext, n: int = 2) -> dict[str, np.ndarray]:
    return {k: v[:n] for k, v in calibration_data(ctx).items()}


def map_inputs(
    batch: dict[str, np.ndarray], model_inputs: list[tuple[str, Any]]
) -> dict[str, np.ndarray]:
    """Match data arrays to a graph's inputs by name, else by position; cast dtypes."""
    names = [name for name, _ in model_inputs]
    if set(names) <= set(batch):
        arrays = [batch[n] for n in names]
    elif len(batch) == len(names):
        arrays = list(batch.values())
    else:
        raise ValueError(f"model inputs {names} do not match data arrays {list(batch)}")
    return {
        name: np.ascontiguousarray(arr, dtype=dtype) if dtype is not None else arr
        for (name, dtype), arr in zip(model_inputs, arrays, strict=True)
    }


def is_transformer(ctx: BuildContext) -> bool:
    return ctx.source.kind == "hf" or "attention_mask" in ctx.input_names


def check_options(options: dict[str, Any], allowed: set[str], runtime: str) -> None:
    """Unknown candidate options are an error, not silently ignored settings."""
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)} for {runtime}; "
            f"known: {', '.join(sorted(allowed))}"
        )
