"""A user's ONNX file made ready for ONNX Runtime's quantizers: weights as initializers.

Converters other than PyTorch's (paddle2onnx, tf2onnx, older exporters) often
keep the weights as `Constant` nodes, and some list the initializers among the
graph inputs (IR version 3 required that). ONNX Runtime's quantizers look a
weight up among the initializers only: a Constant weight stops dynamic INT8 on
a Conv with a bare "Expected conv2d_394.w_0 to be an initializer" and hides
every MatMul from the INT4 quantizer. An initializer that is also an input may
be fed at run time, so it is no weight either: the float16 converter keeps it
float32 behind a Cast.

Once per run (the cached step `onnx-normalized`), before ONNX Runtime's INT8,
INT4 and float16 steps, a copy is rewritten by onnx_ir's own passes (the IR
that onnxscript builds on): every tensor-valued Constant node becomes an
initializer, initializers leave the graph inputs, and shapes are inferred. The
arithmetic is unchanged. What it did is recorded in each variant's
quantization settings.

Not normalized, on purpose:

- the FP32 ONNX Runtime candidate runs the user's file as given: it is the
  quality reference, and the variants are judged against what the user ships;
- the OpenVINO conversion reads the user's file: its ONNX frontend turns Constant
  weights and initializer inputs into constants itself, and NNCF works on the IR;
- files this run's own exporters made (torch, Keras): they write weights as
  initializers and never list them as inputs, so the passes would change
  nothing, yet load and rewrite the whole model, and those runs' quantizers
  would start from a new file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bakeoff.transforms import StepFailed, cached_step

STEP = "onnx-normalized"
EXTERNAL_DATA = "model.onnx.data"  # next to model.onnx, when the user's file has external data


def quantizer_input(
    onnx_fp32: dict[str, Any], artifacts_dir: str
) -> tuple[str, dict[str, Any] | None]:
    """The ONNX file ONNX Runtime's quantizers start from, and what normalizing it did
    (None for a file this run's own exporters made: see the module docstring).

    `onnx_fp32` is `ensure_onnx`'s result; the normalized copy is the run's step
    `onnx-normalized`, built once and shared by every quantizer. A file that cannot
    be normalized is quantized as it is, and the settings say why.
    """
    path = str(onnx_fp32["path"])
    if onnx_fp32.get("exporter") != "user-provided":
        return path, None
    try:
        step = cached_step(artifacts_dir, STEP, lambda d: normalize(path, d))
    except StepFailed as exc:
        return os.path.abspath(path), {"applied": False, "reason": str(exc)}
    return str(step["path"]), dict(step["normalization"])


def describe(normalization: dict[str, Any] | None) -> str:
    """What normalizing did, for a failed step's reason ("" when nothing ran)."""
    if normalization is None:
        return ""
    if not normalization.get("applied"):
        return f" (the file was used as given: normalizing it failed: {normalization['reason']})"
    return (
        f" (after normalizing the file: {normalization['constants_lifted']} Constant nodes "
        f"lifted to initializers, {normalization['initializer_inputs_removed']} initializers "
        "removed from the graph inputs)"
    )


def normalize(src_path: str, out_dir: Path) -> dict[str, Any]:
    """Lift Constant nodes to initializers, drop initializers from the graph inputs and
    infer shapes; write `out_dir/model.onnx` (with external data if the source had it)."""
    import onnx_ir as ir
    from onnx_ir.passes.common import (
        LiftConstantsToInitializersPass,
        RemoveInitializersFromInputsPass,
        ShapeInferencePass,
    )

    try:
        model = ir.load(src_path)  # external data stays on disk until saved
    except Exception as exc:
        raise StepFailed(
            f"onnx_ir could not read {src_path}: {type(exc).__name__}: {' '.join(str(exc).split())}"
        ) from exc
    constants, inputs, shaped = _constants(model), _inputs(model), _shaped(model)
    passes = [
        # size_limit 0: a bias or a small kernel has fewer than the pass's default
        # 16 elements, and the quantizers need those as initializers too (a Conv
        # bias for static INT8); lift_all_constants: a weight written as
        # value_floats is a weight all the same.
        LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        RemoveInitializersFromInputsPass(),
        # Not strict: a node whose shape cannot be inferred leaves its own output
        # unknown instead of the whole graph's (shapes annotate; nothing needs them).
        ShapeInferencePass(strict_mode=False),
    ]
    ir.passes.PassManager(passes)(model)
    removed = inputs - _inputs(model)
    ir_version = model.ir_version
    if removed and model.ir_version < 4:
        # IR 3 required every initializer among the inputs; IR 4 changed only that.
        model.ir_version = 4
    external = any(
        isinstance(value.const_value, ir.ExternalTensor)
        for graph in model.graphs()
        for value in graph.initializers.values()
    )
    path = out_dir / "model.onnx"
    # Without external_data, ir.save would keep external tensors pointing at a
    # file next to the *saved* model that does not exist; with it, every large
    # initializer (lifted ones included) goes to one file beside model.onnx.
    ir.save(model, path, external_data=EXTERNAL_DATA if external else None)
    normalization = {
        "applied": True,
        "tool": f"onnx_ir {ir.__version__}",
        "passes": [
            "LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)",
            "RemoveInitializersFromInputsPass()",
            "ShapeInferencePass(strict_mode=False)",
        ],
        "constants_lifted": constants - _constants(model),
        "initializer_inputs_removed": removed,
        "shapes_inferred": _shaped(model) - shaped,
        "ir_version": [ir_version, model.ir_version],
        "external_data": EXTERNAL_DATA if external else None,
    }
    return {"path": str(path), "normalization": normalization}


def _constants(model: Any) -> int:
    import onnx_ir as ir

    return sum(
        node.op_type == "Constant" and node.domain in ("", "onnx.ai")
        for node in ir.traversal.RecursiveGraphIterator(model.graph)
    )


def _inputs(model: Any) -> int:
    return sum(len(graph.inputs) for graph in model.graphs())


def _shaped(model: Any) -> int:
    return sum(
        out.shape is not None for graph in model.graphs() for node in graph for out in node.outputs
    )
