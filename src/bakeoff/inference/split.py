"""A workload's samples cut once, seeded, into the run's data file: the quality
hold-out, the timing pool and the calibration set (docs/method.md §1)."""

from __future__ import annotations

import numpy as np

from bakeoff.batching import CONST_PREFIX, Layout
from bakeoff.inference.quality_outputs import ALT_SPLIT
from bakeoff.workload import Workload

SPLIT_SEED = 0


def split_data(workload: Workload, quick: bool) -> dict[str, np.ndarray]:
    """Shuffle once (seeded), then cut: quality hold-out | timing pool (+ calibration).

    Each batched input is cut along its own batch axis; constants are stored once
    (see bakeoff.batching for the file's keys).
    """
    layout = Layout.of(workload.source)
    n = workload.n_samples
    order = np.random.default_rng(SPLIT_SEED).permutation(n)
    asked = workload.spec.data.quality_samples if workload.spec.data else None
    wanted = asked or min(64 if quick else 256, n // 2)
    n_quality = max(1, min(wanted, n - 2))
    quality_idx, pool_idx = order[:n_quality], order[n_quality:]
    calib_idx = pool_idx[: min(len(pool_idx), 32 if quick else 128)]
    splits = {
        "quality": layout.take(workload.inputs, quality_idx),
        "pool": layout.take(workload.inputs, pool_idx),
        "calib": layout.take(workload.inputs, calib_idx),
    }
    extra = layout.npz_keys(workload.inputs)
    arrays: dict[str, np.ndarray] = {}
    # Input order is kept in the file (constants where they stand among the inputs):
    # readers without the workload (export) take the names from it.
    for name in workload.inputs:
        if name in layout.constants:
            arrays[CONST_PREFIX + name] = extra[CONST_PREFIX + name]
            continue
        for split, cut in splits.items():
            arrays[f"{split}/{name}"] = cut[name]
    arrays.update({k: v for k, v in extra.items() if not k.startswith(CONST_PREFIX)})
    if workload.source.variable_axes:
        # The same held-out samples at a second shape: variable axes cut to half.
        for name, alt in splits["quality"].items():
            if name in layout.constants:
                continue
            for axis in workload.source.variable_axes.get(name, []):
                alt = np.take(alt, np.arange(max(1, alt.shape[axis] // 2)), axis=axis)
            arrays[f"{ALT_SPLIT}/{name}"] = alt
    if workload.labels is not None:
        arrays["quality_labels"] = workload.labels[quality_idx]
    return arrays
