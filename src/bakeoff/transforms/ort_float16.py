"""ONNX FP32 -> FP16 for ONNX Runtime, and what the CPU provider really computes in FP16.

The converter is the one that ships with onnxruntime (onnxruntime.transformers.float16).
Inputs and outputs stay float32 (keep_io_types) so every variant is fed the same
arrays. ONNX Runtime's CPU execution provider has no float16 kernel for many
operators (MatMul among them on x86) and silently inserts Casts to run them in
float32; one profiled inference at build time counts which nodes really ran in
float16, so the result says so instead of looking like an FP16 speed figure.
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.transforms import StepFailed, step_failed

# These settings change quality, so they are recorded with the artifact.
_FLOAT16_SETTINGS: dict[str, Any] = {
    "method": "convert",
    "converter": "onnxruntime.transformers.float16.convert_float_to_float16",
    "keep_io_types": True,
    "op_block_list": "converter default",
    "force_fp16_initializers": False,
}


FLOAT16_STEP = (
    "ONNX Runtime float16 conversion (onnxruntime.transformers.float16.convert_float_to_float16)"
)
FLOAT16_ADVICE = "Try the openvino fp16 candidate (OpenVINO's f16 precision hint on the FP32 model)"


def _sorted(model: Any) -> Any:
    """The converter puts the Casts it adds for float32 inputs after the nodes that
    read them: ONNX Runtime sorts a graph itself, but the ONNX checker (and other
    runtimes) want it topologically sorted, as the format says."""
    import onnx_ir

    graph = onnx_ir.from_proto(model)
    graph.graph.sort()
    return onnx_ir.to_proto(graph)


def float16(
    source: str,
    out_dir: Path,
    example: dict[str, np.ndarray],
    normalized: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Convert to float16 (float32 inputs/outputs) and profile one CPU inference.

    A user's file is normalized first (transforms/onnx_normalize.py): the converter
    leaves a weight that is also a graph input float32 behind a Cast (keep_io_types
    keeps inputs float32), and counts no initializers where weights are Constants.
    """
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from bakeoff.transforms.onnx_check import refuse_invalid
    from bakeoff.transforms.onnx_normalize import describe

    try:
        model = convert_float_to_float16(onnx.load(source), keep_io_types=True)
    except Exception as exc:
        raise step_failed(FLOAT16_STEP, exc, FLOAT16_ADVICE, describe(normalized)) from exc
    model = _sorted(model)
    path = out_dir / "model.onnx"
    onnx.save(model, str(path))
    refuse_invalid(FLOAT16_STEP, path, source, FLOAT16_ADVICE)
    dtypes = collections.Counter(init.data_type for init in model.graph.initializer)
    settings = dict(_FLOAT16_SETTINGS)
    settings["float16_initializers"] = dtypes[onnx.TensorProto.FLOAT16]
    settings["float32_initializers"] = dtypes[onnx.TensorProto.FLOAT]
    settings["cpu_kernels"] = cpu_kernel_precisions(path, out_dir, example)
    if normalized is not None:
        settings["onnx_normalization"] = normalized
    return {"path": str(path), "quantization": settings}


def cpu_kernel_precisions(
    path: Path, out_dir: Path, example: dict[str, np.ndarray]
) -> dict[str, Any]:
    """One profiled inference on the CPU provider: how many nodes ran in float16.

    The profile names each executed node with its output types, after ONNX
    Runtime's own Cast insertion, so this is what runs, not what the file says.
    """
    import onnxruntime as ort

    from bakeoff.tensors import ONNX_NUMPY_TYPES, map_inputs

    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(out_dir / "profile")
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        inputs = [(i.name, ONNX_NUMPY_TYPES.get(i.type)) for i in session.get_inputs()]
        session.run(None, map_inputs(example, inputs))
    except Exception as exc:
        raise StepFailed(
            "ONNX Runtime's CPU execution provider could not run the float16 model: "
            f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        ) from exc
    profile = session.end_profiling()
    try:
        events = json.loads(Path(profile).read_text())
    finally:
        os.remove(profile)
    return summarize_profile(events)


def summarize_profile(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Count executed nodes by the float type they computed in."""
    by_type: dict[str, collections.Counter[str]] = {
        "float16": collections.Counter(),
        "float": collections.Counter(),
    }
    casts = 0
    for event in events:
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
            continue
        args = event.get("args", {})
        op = str(args.get("op_name", "?"))
        if op == "Cast":
            casts += 1
            continue
        outputs = {t for shape in args.get("output_type_shape", []) for t in shape}
        for dtype in ("float16", "float"):  # a node with a float16 output computed in float16
            if dtype in outputs:
                by_type[dtype][op] += 1
                break
    return {
        "float16_nodes": sum(by_type["float16"].values()),
        "float32_nodes": sum(by_type["float"].values()),
        "cast_nodes": casts,
        "float16_ops": sorted(by_type["float16"]),
        "float32_ops": sorted(by_type["float"]),
        "profiled": "one inference on CPUExecutionProvider, graph optimization level all",
    }
