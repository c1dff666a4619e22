"""Helpers shared by backends, as functions (no base classes)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext
from bakeoff.batching import Layout, read_split


def calibration_data(ctx: BuildContext) -> tuple[dict[str, np.ndarray], Layout]:
    """Calibration split of the workload's own data (never the quality hold-out),
    constants included, with the layout that says where its samples are."""
    return read_split(ctx.data_path, "calib", ctx.input_names)


def example_inputs(ctx: BuildContext, n: int = 2) -> dict[str, np.ndarray]:
    """The first `n` calibration samples (along each input's batch axis)."""
    arrays, layout = read_split(ctx.data_path, "calib", ctx.input_names)
    return layout.contiguous(layout.cut(arrays, 0, n))


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


def package_availability(dist: str, module: str, install: str) -> Availability:
    """Installed or not, judged from metadata: importing a runtime takes seconds."""
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = None
    try:
        found = importlib.util.find_spec(module)
    except ImportError:  # an install whose import machinery fails is not usable either
        found = None
    if version is None or found is None:
        return Availability(False, None, f"{dist} is not installed", install)
    return Availability(True, version)
