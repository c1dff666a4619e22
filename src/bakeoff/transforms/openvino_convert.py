"""ONNX -> OpenVINO IR (kept FP32 on disk), and NNCF post-training INT8 quantization."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def ir_from_onnx(onnx_path: str, out_dir: Path) -> dict[str, Any]:
    import openvino as ov

    model = ov.convert_model(onnx_path)
    path = out_dir / "model.xml"
    # save_model compresses weights to FP16 by default; an FP32 variant must not.
    ov.save_model(model, str(path), compress_to_fp16=False)
    return {"path": str(path)}


def nncf_int8(
    ir_path: str, out_dir: Path, calibration: dict[str, np.ndarray], transformer: bool
) -> dict[str, Any]:
    import nncf
    import openvino as ov

    model = ov.Core().read_model(ir_path)
    names = [p.get_any_name() for p in model.inputs]
    n = len(next(iter(calibration.values())))
    samples = [
        {name: calibration[name][i : i + 1] for name in names if name in calibration}
        for i in range(n)
    ]
    kwargs: dict[str, Any] = {"subset_size": n, "preset": nncf.QuantizationPreset.MIXED}
    if transformer:
        kwargs["model_type"] = nncf.ModelType.TRANSFORMER
    quantized = nncf.quantize(model, nncf.Dataset(samples), **kwargs)
    path = out_dir / "model.xml"
    ov.save_model(quantized, str(path), compress_to_fp16=False)
    settings = {
        "tool": "nncf.quantize",
        "preset": "mixed",
        "model_type": "transformer" if transformer else "default",
        "calibration_samples": n,
    }
    return {"path": str(path), "quantization": settings}
