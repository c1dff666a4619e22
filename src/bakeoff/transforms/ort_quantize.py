"""ONNX Runtime INT8: dynamic (weights only, per channel) and static (QDQ, calibrated);
INT4 weight-only (MatMulNBits, blockwise, calibration-free).

Settings are recorded with the artifact because they change quality: default
dynamic INT8 loses ~3% cosine on MiniLM where per-channel keeps it within 1%;
INT4 with blocks of 32 loses ~3% there, blocks of 128 ~4.5%.
"""

from __future__ import annotations

import collections
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import AXIS_0, Layout
from bakeoff.transforms import onnx_check

# Each quantizer's failure names its library call and what the user can do instead.
# A weight the normalization cannot make an initializer is computed in the graph
# (a Mul or Transpose of a constant, say): constant folding makes it one.
_REEXPORT = (
    "re-export the model with its weights as initializers (constant-folded, e.g. by "
    "onnx-simplifier, where a weight is computed in the graph)"
)
DYNAMIC_STEP = "ONNX Runtime dynamic INT8 quantization (onnxruntime.quantization.quantize_dynamic)"
DYNAMIC_ADVICE = (
    "Try the openvino int8 nncf candidate (NNCF quantizes the same file on its own IR) "
    f"or onnxruntime int8 static, or {_REEXPORT}"
)
STATIC_STEP = "ONNX Runtime static INT8 quantization (onnxruntime.quantization.quantize_static)"
STATIC_ADVICE = (
    "Try the openvino int8 nncf candidate or onnxruntime int8 dynamic (no calibration), "
    f"or {_REEXPORT}"
)
INT4_STEP = (
    "ONNX Runtime INT4 weight-only quantization "
    "(onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer)"
)
INT4_ADVICE = (
    f"Try the openvino int4 weight-only candidate (NNCF weight compression), or {_REEXPORT}"
)


def _private(source: str) -> Any:
    """The FP32 model as this quantizer's own copy in memory. Given a path, ONNX
    Runtime's quantizers write `<name>-inferred.onnx` beside the file and delete it;
    the dynamic and the static INT8 builds run side by side from one FP32 file, so one
    deleted the other's, which then failed (FileNotFoundError, on Resemblyzer's LSTM).
    Given the model, they infer its shapes in a temporary folder of their own."""
    import onnx

    return onnx.load(source)


def dynamic_int8(
    source: str,
    out_dir: Path,
    normalized: dict[str, Any] | None = None,
    reduce_range: bool = False,
) -> dict[str, Any]:
    """`source` is the FP32 file as `onnx_normalize.quantizer_input` gives it, and
    `normalized` what normalizing did (recorded, and named when the step fails).
    `reduce_range`: 7-bit weights, as ONNX Runtime advises for x86 CPUs without VNNI,
    where its U8S8 kernels multiply-add through 16 bits (VPMADDUBSW) and 8-bit
    weights can saturate (`reduce_range_here`)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from bakeoff.transforms import step_failed
    from bakeoff.transforms.onnx_normalize import describe

    path = out_dir / "model.onnx"
    settings: dict[str, Any] = {
        "per_channel": True,
        "weight_type": "QInt8",
        "reduce_range": reduce_range,
    }
    try:
        with _in_temp_dir():  # the quantizer leaves temporary files in the working directory
            quantize_dynamic(
                _private(source),
                str(path),
                per_channel=True,
                weight_type=QuantType.QInt8,
                reduce_range=reduce_range,
            )
    except Exception as exc:
        raise step_failed(DYNAMIC_STEP, exc, DYNAMIC_ADVICE, describe(normalized)) from exc
    onnx_check.refuse_invalid(DYNAMIC_STEP, path, source, DYNAMIC_ADVICE)
    if normalized is not None:
        settings["onnx_normalization"] = normalized
    return {"path": str(path), "quantization": settings}


def reduce_range_here() -> bool:
    """Whether this CPU wants ONNX Runtime's 7-bit weights for dynamic INT8: x86
    without VNNI or AMX-INT8 (`hardware.int8_path`), as ONNX Runtime's quantization
    guide says; a VNNI core accumulates 8-bit products without saturating."""
    from bakeoff import hardware

    return hardware.int8_path() in ("avx2", "none")


def static_int8(
    source: str,
    out_dir: Path,
    calibration: dict[str, np.ndarray],
    batch: int = 8,
    layout: Layout = AXIS_0,
    normalized: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    from bakeoff.transforms import StepFailed, step_failed
    from bakeoff.transforms.onnx_normalize import describe

    n = layout.count(calibration)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.starts = iter(range(0, n, batch))

        def get_next(self) -> dict[str, np.ndarray] | None:
            start = next(self.starts, None)
            if start is None:
                return None
            # along each input's batch axis; constants in every batch as they are
            return layout.contiguous(layout.cut(calibration, start, start + batch))

    path = out_dir / "model.onnx"
    settings: dict[str, Any] = {
        "format": "QDQ",
        "calibration": "MinMax",
        "calibration_samples": n,
        "per_channel": True,
        "activation_type": "QInt8",
        "weight_type": "QInt8",
    }

    def quantize(per_channel: bool) -> None:
        try:
            with _in_temp_dir():
                quantize_static(
                    _private(source),
                    str(path),
                    Reader(),
                    quant_format=QuantFormat.QDQ,
                    per_channel=per_channel,
                    activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax,
                )
        except Exception as exc:
            raise step_failed(STATIC_STEP, exc, STATIC_ADVICE, describe(normalized)) from exc

    # Per-channel weights first (they keep more quality); where the graph that gives
    # is one ONNX Runtime or the checker refuses (per-channel DequantizeLinear needs
    # opset 13: a Paddle export of opset 12 gets an `axis` it does not know), per-tensor.
    quantize(per_channel=True)
    problem = onnx_check.written_problem(path, source)
    if problem is not None:
        settings["per_channel"] = False
        settings["retried"] = f"per-channel weights wrote an invalid model ({problem})"
        quantize(per_channel=False)
        again = onnx_check.written_problem(path, source)
        if again is not None:
            raise StepFailed(
                f"{STATIC_STEP} wrote an invalid model with per-channel weights ({problem}) "
                f"and with per-tensor weights ({again}). {STATIC_ADVICE}"
            )
    if normalized is not None:
        settings["onnx_normalization"] = normalized
    return {"path": str(path), "quantization": settings}


INT4_BLOCK_SIZE = 32  # smaller blocks keep more quality (see the module docstring)


def int4_weight_only(
    source: str,
    out_dir: Path,
    block_size: int = INT4_BLOCK_SIZE,
    normalized: dict[str, Any] | None = None,
) -> dict:
    """MatMul weights to 4-bit blocks (MatMulNBits); activations stay float32.

    The quantizer only handles MatMul with a constant weight, while exporters
    write a 2-D Linear as Gemm; those Gemms are first rewritten to MatMul + Add
    (same arithmetic) so an MLP is quantized too, not silently left FP32.
    """
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from bakeoff.transforms import StepFailed, step_failed
    from bakeoff.transforms.onnx_normalize import describe

    model = onnx.load(source)
    rewritten = _gemm_to_matmul(model)
    try:
        quantizer = MatMulNBitsQuantizer(
            model,
            bits=4,
            block_size=block_size,
            is_symmetric=True,
            # Unset accuracy level: MatMulNBits dequantizes to float32 and computes in
            # float32 (weight-only); level 4 would quantize activations to int8 too.
            accuracy_level=None,
            op_types_to_quantize=("MatMul",),
        )
        with _in_temp_dir():
            quantizer.process()
    except Exception as exc:
        raise step_failed(INT4_STEP, exc, INT4_ADVICE, describe(normalized)) from exc
    ops = collections.Counter(n.op_type for n in quantizer.model.model.graph.node)
    if ops["MatMulNBits"] == 0:
        raise StepFailed(
            "INT4 weight-only found no MatMul/Gemm with a constant 2-D weight to quantize "
            f"(graph has {ops['MatMul']} MatMul and {ops['Gemm']} Gemm nodes)"
            f"{describe(normalized)}. {INT4_ADVICE}"
        )
    path = out_dir / "model.onnx"
    quantizer.model.save_model_to_file(str(path), use_external_data_format=False)
    onnx_check.refuse_invalid(INT4_STEP, path, source, INT4_ADVICE)
    settings = {
        "method": "weight-only",
        "bits": 4,
        "block_size": block_size,
        "symmetric": True,
        "algorithm": "round-to-nearest",
        "accuracy_level": 0,  # 0: float32 compute on dequantized weights
        "calibration": None,
        "quantized_matmuls": ops["MatMulNBits"],
        # activation x activation MatMuls (attention) have no weight and stay float32
        "float32_matmuls": ops["MatMul"],
        "gemm_rewritten_to_matmul": rewritten,
    }
    if normalized is not None:
        settings["onnx_normalization"] = normalized
    return {"path": str(path), "quantization": settings}


def _gemm_to_matmul(model: Any) -> int:
    """Rewrite Gemm(A, W[, C]) with a constant W as MatMul(A, W') [+ Add C]; returns count."""
    from onnx import helper, numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    nodes, count = [], 0
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weight = inits.get(node.input[1]) if node.op_type == "Gemm" else None
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        beta = float(attrs.get("beta", 1.0))
        if (
            weight is None
            or len(weight.dims) != 2
            or attrs.get("transA", 0)
            or (bias is not None and beta != 1.0 and bias not in inits)
        ):
            nodes.append(node)
            continue
        w = numpy_helper.to_array(weight)
        w = (w.T if attrs.get("transB", 0) else w) * np.asarray(attrs.get("alpha", 1.0), w.dtype)
        base = node.name or node.output[0]
        w_name = f"{base}_matmul_weight"
        model.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(w), w_name))
        if bias is None:
            nodes.append(
                helper.make_node("MatMul", [node.input[0], w_name], [node.output[0]], base)
            )
        else:
            if beta != 1.0:
                c = numpy_helper.to_array(inits[bias])
                bias = f"{base}_matmul_bias"
                model.graph.initializer.append(
                    numpy_helper.from_array(c * np.asarray(beta, c.dtype), bias)
                )
            product = f"{node.output[0]}_matmul"
            nodes.append(helper.make_node("MatMul", [node.input[0], w_name], [product], base))
            nodes.append(helper.make_node("Add", [product, bias], [node.output[0]], f"{base}_add"))
        count += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return count


class _in_temp_dir:
    def __enter__(self) -> None:
        self.old = os.getcwd()
        self.tmp = tempfile.TemporaryDirectory(prefix="bakeoff-quant-")
        os.chdir(self.tmp.name)

    def __exit__(self, *exc: object) -> None:
        os.chdir(self.old)
        self.tmp.cleanup()
