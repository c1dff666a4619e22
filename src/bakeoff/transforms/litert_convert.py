"""Keras 3 model -> LiteRT flatbuffer (.tflite), with TensorFlow's converter.

Keras' own LiteRT exporter (``model.export(format="litert")``) runs the
documented Keras 3 path (ExportArchive -> SavedModel -> TFLiteConverter) on the
TensorFlow backend and passes converter settings through, so quantization is
the converter's own post-training quantization:

- fp32: no optimization.
- fp16 ``weight-only``: weights stored as float16; the CPU kernels dequantize
  them to float32 at load, so this saves size, not arithmetic.
- int8 ``static``: full-integer post-training quantization calibrated on the
  workload's calibration split (weights and activations int8), with float32
  inputs and outputs so callers feed the same arrays. If an operator has no
  int8 kernel, the converter is asked again allowing float fallback, and the
  artifact says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import AXIS_0, Layout
from bakeoff.transforms import StepFailed

BACKEND = "tensorflow"


def convert(
    model: Any,
    precision: str,
    calib: dict[str, np.ndarray],
    out: Path,
    layout: Layout = AXIS_0,
) -> dict[str, Any]:
    import tensorflow as tf

    path = out / f"model-{precision}.tflite"

    def representative() -> Iterator[list[np.ndarray]]:
        # one sample at a time, as the converter expects (constants as they are)
        for sample in layout.samples(calib):
            yield [v.astype(np.float32) for v in sample.values()]

    quant: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    if precision == "fp16":
        kwargs = {
            "optimizations": [tf.lite.Optimize.DEFAULT],
            "target_spec": {"supported_types": [tf.float16]},
        }
        quant = {"method": "weight-only", "weights": "float16", "compute": "float32"}
    elif precision == "int8":
        kwargs = {
            "optimizations": [tf.lite.Optimize.DEFAULT],
            "representative_dataset": representative,
            "target_spec": {"supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]},
        }
        quant = {
            "method": "static",
            "weights": "int8 per channel",
            "activations": "int8, ranges calibrated on the workload's calibration split",
            "calibration_samples": layout.count(calib),
            "io": "float32 (quantize/dequantize at the edges)",
            "float_fallback": False,
        }
    elif precision != "fp32":
        raise StepFailed(f"LiteRT {precision} is not built by this version")
    try:
        model.export(str(path), format="litert", verbose=False, **kwargs)
    except Exception as exc:
        if precision != "int8":
            raise StepFailed(_reason(precision, exc)) from exc
        # Some operator has no int8 kernel: allow float kernels for those.
        kwargs["target_spec"] = {
            "supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS_INT8, tf.lite.OpsSet.TFLITE_BUILTINS]
        }
        quant["float_fallback"] = f"full-integer failed: {_reason(precision, exc)}"
        try:
            model.export(str(path), format="litert", verbose=False, **kwargs)
        except Exception as exc2:
            raise StepFailed(_reason(precision, exc2)) from exc2
    result: dict[str, Any] = {"path": str(path), "exporter": "keras-tensorflow TFLiteConverter"}
    if quant:
        result["quantization"] = quant
    return result


def _reason(precision: str, exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"LiteRT {precision} conversion failed: {type(exc).__name__}: {text[:300]}"
