"""How close each candidate comes to the machine's limit: the model's FLOPs per
sample (counted on its FP32 ONNX graph), each candidate's achieved GFLOP/s at its
measured throughput, and that as a fraction of this machine's GEMM peak at the
same threads and precision (`bakeoff.efficiency`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bakeoff.batching import read_split
from bakeoff.efficiency import PeakProbe, candidate_efficiency
from bakeoff.flops import flops_per_sample
from bakeoff.inference.context import RunContext
from bakeoff.trials.launcher import worker_env


def _fp32_onnx(ctx: RunContext) -> str | None:
    """The model's FP32 ONNX graph: the user's file, or the run's export of it (the
    step ONNX Runtime and OpenVINO candidates are built from)."""
    source = ctx.workload.source
    if source.kind == "onnx" and source.path:
        return source.path
    step = ctx.folder.artifacts / "onnx-fp32" / "step.json"
    try:
        path = json.loads(step.read_text()).get("path")
    except (OSError, ValueError):
        return None
    return path if path and Path(path).exists() else None


def _call_shapes(ctx: RunContext, samples: int) -> dict[str, list[int]]:
    """Each input's shape for a call of `samples` samples, from the run's own data
    (axes that vary take the data's sizes, which the graph alone does not know)."""
    arrays, layout = read_split(ctx.folder.data, "pool", ctx.job_base.input_names)
    shapes = {}
    for name, array in arrays.items():
        shape = list(array.shape)
        if name not in layout.constants:
            shape[layout.batch_axes.get(name, 0)] = samples
        shapes[name] = shape
    return shapes


# Counted on a call of two samples, then halved: at one, ONNX's reference evaluator
# cannot fold what the TorchScript exporter writes for a batch of one (MiniLM's
# position ids: "cannot reshape array of size 1 into shape (1,128)"), and the count
# would be lost; a batch-linear model's count per sample is the same at any size.
_COUNTED_AT = 2


def model_flops(ctx: RunContext) -> int | None:
    """FLOPs per sample of the workload's model, or None where there is no graph to
    count (no ONNX export in this run) or the count would be wrong."""
    path = _fp32_onnx(ctx)
    if path is None:
        return None
    return flops_per_sample(path, _call_shapes(ctx, _COUNTED_AT), batch_size=_COUNTED_AT)


def start_probe(ctx: RunContext) -> PeakProbe:
    """The GEMM peak's process for the precisions the run has, with the threads the
    workers get, started before the builds: its imports run beside them."""
    precisions = {c.variant.precision for c in ctx.candidates if c.status == "pending"}
    return PeakProbe(ctx.threads, precisions | {"fp32"}, worker_env(ctx.threads))


def measure_peaks(ctx: RunContext, probe: PeakProbe) -> dict[str, dict[str, Any]]:
    """The GEMM peak per precision; called while nothing else runs or is timed."""
    if probe.kinds:
        ctx.rep.stage(f"measuring this machine's GEMM peak ({ctx.threads} thread(s))")
    return probe.measure()


def set_efficiency(ctx: RunContext, flops: int | None, peaks: dict[str, Any] | None) -> None:
    """Each ok candidate's `efficiency`, from its measured throughput."""
    for c in ctx.candidates:
        if c.status != "ok":
            continue
        c.efficiency = candidate_efficiency(flops, c.samples_per_s(), peaks, c.variant.precision)
        ctx.save(c)
