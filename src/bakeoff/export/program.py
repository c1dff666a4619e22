"""The export of a torch / torch-compile candidate: the measured model, rebuilt the way
the backend built it (BF16/FP16 autocast, INT4 weight-only layers...), as a
torch.export program with a dynamic batch axis where the model allows one, checked
against the model before it is saved as ``model.pt2``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import Layout
from bakeoff.errors import UserError
from bakeoff.export.measured import MeasuredCandidate
from bakeoff.paths import RunFolder
from bakeoff.source import ModelSource


def torch_program(measured: MeasuredCandidate, dest: Path) -> dict[str, Any]:
    """Write ``model.pt2`` of the measured candidate to `dest`; return what the manifest
    says of it (file, exporter, dynamic_batch, model_verified_against_run)."""
    cand = measured.cand
    if cand["precision"] == "int8" and cand["method"] == "dynamic":
        raise UserError(
            f"candidate {cand['id']}: PyTorch dynamic INT8 cannot be saved as a "
            "torch.export program (its quantized Linear layers keep packed weights "
            "torch.export cannot serialize); export torch-fp32 and apply "
            "torch.ao.quantization.quantize_dynamic after loading, or another candidate"
        )
    import torch

    model, verified = measured_model(measured)
    wrapped = as_measured(model, cand["precision"])
    program, args, dynamic = _export_program(wrapped, cand, measured.examples, measured.layout)
    _check_same(wrapped, program, args, cand)
    torch.export.save(program, str(dest / "model.pt2"))
    return {
        "file": "model.pt2",
        "exporter": "torch.export",
        "dynamic_batch": dynamic,
        "model_verified_against_run": verified,
    }


def measured_model(measured: MeasuredCandidate) -> tuple[Any, bool]:
    """The candidate's model as the torch backend builds it, and whether the workload's
    model files were checked to hash as they did when the run measured them."""
    from bakeoff.backends import LoadContext, Variant, torch_eager

    cand = measured.cand
    source, verified = measured_source(measured.record, measured.run)
    variant = Variant(cand["runtime"], cand["precision"], cand["method"])
    batch_size = int(cand["batch_size"])
    ctx = LoadContext(source, measured.threads, batch_size, tuple(measured.examples))
    model, _ = torch_eager.load_model(variant, ctx)
    return model, verified


def measured_source(record: dict[str, Any], run: RunFolder) -> tuple[ModelSource, bool]:
    """The workload's model source, and whether its files were checked
    to hash as they did when the run measured them (False where the run kept no key)."""
    from bakeoff import cache
    from bakeoff.loader import load_workload

    ref = record["settings"].get("workload_ref")
    if not ref:
        raise UserError(f"run {record['run_id']} does not say which workload it ran")
    source = load_workload(ref).source
    key_file = run.artifacts / cache.KEY_FILE
    verified = False
    if key_file.exists():
        measured = json.loads(key_file.read_text())["components"]["model"]
        if cache.model_hash(source)["hash"] != measured:
            raise UserError(
                f"the model of {ref} changed since run {record['run_id']} (its files hash "
                "differently): the export would not be the model that was measured; run again"
            )
        verified = True
    return source, verified


def as_measured(model: Any, precision: str) -> Any:
    """The model as a module called the way it was measured (under CPU autocast for
    BF16/FP16, as torch_eager.with_autocast calls it), in eval mode."""
    import torch

    from bakeoff.backends.torch_eager import AUTOCAST_DTYPES

    dtype = AUTOCAST_DTYPES.get(precision)

    class Measured(torch.nn.Module):
        """The model as it was called when measured (under autocast for BF16/FP16)."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            if dtype is None:
                return self.inner(*args)
            with torch.autocast("cpu", dtype=getattr(torch, dtype)):
                return self.inner(*args)

    return Measured(model).eval()


def _export_program(
    wrapped: Any, cand: dict[str, Any], examples: dict[str, np.ndarray], layout: Layout
) -> tuple[Any, tuple[Any, ...], bool]:
    """torch.export of `wrapped` with a dynamic batch axis, else (a model that
    specializes on batch) at the measured batch size: (program, the example args it
    was exported with, whether its batch is dynamic)."""
    import torch

    def first(n: int) -> tuple[Any, ...]:
        # n samples along each input's batch axis; a constant as it is (0-d stays 0-d)
        cut = layout.contiguous(layout.cut(examples, 0, n))
        return tuple(torch.from_numpy(v) for v in cut.values())

    args = first(2)
    batch = torch.export.Dim("batch")
    per_input = tuple(None if (axis := layout.axis(n)) is None else {axis: batch} for n in examples)
    try:
        return torch.export.export(wrapped, args, dynamic_shapes=(per_input,)), args, True
    except Exception:  # a model that specializes on batch: one shape, the measured one
        pass
    args = first(int(cand["batch_size"]))
    try:
        program = torch.export.export(wrapped, args)
    except Exception as exc:
        raise UserError(
            f"candidate {cand['id']}: torch.export failed: {type(exc).__name__}: {exc}"
        ) from None
    return program, args, False


def _check_same(wrapped: Any, program: Any, args: tuple[Any, ...], cand: dict[str, Any]) -> None:
    """The program's first output must be the model's on the same inputs."""
    import torch

    from bakeoff.models import first_output

    with torch.no_grad():
        want = first_output(wrapped(*args)).float()
        got = first_output(program.module()(*args)).float()
    if not torch.allclose(want, got, rtol=1e-4, atol=1e-5):
        diff = float((want - got).abs().max())
        raise UserError(
            f"candidate {cand['id']}: the exported program differs from the model "
            f"(max abs difference {diff:.3g}); not exported"
        )
