"""A variant's outputs on the quality hold-out, saved for the gate: at the job's quality
batch size (or its own, where the variant fails there), and again at a second shape
with the workload's variable axes halved. Part of the worker process (`worker`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.backends import Runner
from bakeoff.batching import Layout, has_split, read_split
from bakeoff.inference.messages import LoadJob, ReferenceJob
from bakeoff.judge.outputs import ONLY_OUTPUT, Named, save_named


def batches(
    arrays: dict[str, np.ndarray], layout: Layout, batch_size: int, count: int
) -> list[dict]:
    """`count` batches of exactly `batch_size`, cycling through the samples, each
    input cut along its own batch axis; constants go into every batch unchanged.

    Always full batches: a short last batch would change the shape, and a
    compiled model would recompile (or fail) on it.
    """
    n = layout.count(arrays)
    idx = np.arange(count * batch_size) % n
    return [
        layout.contiguous(layout.take(arrays, idx[i * batch_size : (i + 1) * batch_size]))
        for i in range(count)
    ]


def named_numpy(runner: Runner, output: Any) -> Named:
    """Every output of one call as float arrays, named (`Runner.named_outputs` where
    the runtime gives names, else its first output alone)."""
    if hasattr(runner, "named_outputs"):
        return [(n, np.asarray(a, dtype=np.float32)) for n, a in runner.named_outputs(output)]
    return [(ONLY_OUTPUT, np.asarray(runner.to_numpy(output), dtype=np.float32))]


def _joined(calls: list[Named], n: int) -> Named:
    """Each output's batches joined on axis 0, the repeats that filled the last batch
    dropped. An output other than the first that is not one row per sample (a
    model's constant, a state without a batch axis) cannot be compared per sample:
    it is left out."""
    names = [name for name, _ in calls[0]]
    joined: Named = []
    for i, name in enumerate(names):
        parts = [call[i][1] for call in calls]
        if i and any(p.ndim == 0 or len(p) != len(calls[0][0][1]) for p in parts):
            continue
        joined.append((name, np.concatenate(parts)[:n]))
    return joined


def outputs_on(
    runner: Runner, arrays: dict[str, np.ndarray], layout: Layout, batch_size: int
) -> tuple[Named, float]:
    """Every output on every sample, and the seconds of the first call. Each is taken
    as batched on axis 0 (whatever axis the inputs' batch is on)."""
    clock: Callable[[], int] = getattr(runner, "clock_ns", time.perf_counter_ns)
    n = layout.count(arrays)
    count = -(-n // batch_size)
    calls, first_s = [], 0.0
    for i, batch in enumerate(batches(arrays, layout, batch_size, count)):
        prepared = runner.prepare(batch)
        t0 = clock()
        out = runner.run(prepared)
        if i == 0:
            first_s = (clock() - t0) / 1e9
        calls.append(named_numpy(runner, out))
    return _joined(calls, n), first_s


# The quality hold-out again with the workload's variable axes cut to half: every
# variant is checked at a second shape (a dynamic axis that was exported static,
# or a kernel that is only right at one size, shows up here).
ALT_SPLIT = "quality_alt"


def alt_outputs_path(outputs_path: str | Path) -> Path:
    path = Path(outputs_path)
    return path.with_name(path.stem + ".alt.npy")


def quality_outputs(runner: Runner, job: ReferenceJob | LoadJob, batch_size: int) -> float:
    """Saves the outputs; returns the seconds of the first call (at a shape the
    process had not run, the runtime's compile for it, if any, is in it)."""
    data_path, names = job.base.data_path, job.base.input_names
    quality, layout = read_split(data_path, "quality", names)
    outputs, first_s = outputs_on(runner, quality, layout, batch_size)
    save_named(job.outputs_path, outputs)
    if has_split(data_path, ALT_SPLIT, names):
        alt, _ = read_split(data_path, ALT_SPLIT, names)
        try:
            outputs, _ = outputs_on(runner, alt, layout, batch_size)
        except Exception as exc:
            shapes = ", ".join(f"{k} {layout.sample_shape(k, v.shape)}" for k, v in alt.items())
            raise RuntimeError(
                f"the variant does not run at the second shape (variable axes halved: {shapes}"
                f" per sample): {type(exc).__name__}: {exc}"
            ) from exc
        save_named(alt_outputs_path(job.outputs_path), outputs)
    return first_s


def save_quality_outputs(runner: Runner, job: ReferenceJob | LoadJob) -> dict[str, Any]:
    """The quality outputs, at the job's quality batch size: where the variant fails
    there (a model exported for one batch size), at its own, and says why."""
    own = job.load.batch_size
    at = job.load.quality_batch_size or own
    if at == own:
        quality_outputs(runner, job, own)
        return {"quality_batch_size": own}
    try:
        # The first call at the larger shape: that batch size's first call, where the
        # runtime compiles for it (torch.compile), reported for it (inference.shared_workers).
        first_s = quality_outputs(runner, job, at)
        return {"quality_batch_size": at, "first_call_at_quality_batch_size_s": first_s}
    except Exception as exc:
        quality_outputs(runner, job, own)
        return {
            "quality_batch_size": own,
            "not_at": f"batch size {at} failed: {type(exc).__name__}: {exc}"[:300],
        }
