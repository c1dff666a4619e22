"""OpenVINO on the CPU: FP32 and NNCF post-training INT8.

The inference precision hint is always set explicitly: on CPUs with BF16
support OpenVINO otherwise runs an FP32 model in bf16 without saying so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bakeoff.backends import (
    Availability,
    BuildContext,
    LoadContext,
    Offer,
    Variant,
    package_availability,
)
from bakeoff.backends.common import (
    calibration_data,
    check_options,
    example_inputs,
    is_transformer,
    map_inputs,
)
from bakeoff.transforms import cached_step

RUNTIME = "openvino"
OPTIONS = {"threads", "inference_precision", "num_streams", "performance_hint"}
INSTALL = "pip install openvino==2026.4.1 nncf==3.4.0"


def availability() -> Availability:
    return package_availability("openvino", "openvino", INSTALL)


def offers(precision: str, model_kind: str) -> list[Offer]:
    if model_kind not in ("torch", "hf", "onnx"):
        return [Offer(Variant(RUNTIME, precision), f"the model is {model_kind}, not convertible")]
    if precision == "fp32":
        return [Offer(Variant(RUNTIME, "fp32"))]
    if precision == "int8":
        nncf = package_availability("nncf", "nncf", "pip install nncf==3.4.0")
        if not nncf.available:
            return [Offer(Variant(RUNTIME, "int8", "nncf"), f"{nncf.reason}; {nncf.install}")]
        return [Offer(Variant(RUNTIME, "int8", "nncf"))]
    return [Offer(Variant(RUNTIME, precision), f"{precision} is not built by this version")]


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    from bakeoff.transforms.onnx_export import ensure_onnx
    from bakeoff.transforms.openvino_convert import ir_from_onnx, nncf_int8

    onnx_fp32 = ensure_onnx(ctx.source, ctx.artifacts_dir, example_inputs(ctx))
    ir = cached_step(ctx.artifacts_dir, "ov-fp32", lambda d: ir_from_onnx(onnx_fp32["path"], d))
    if variant.precision == "fp32":
        return {**ir, "exporter": onnx_fp32["exporter"]}
    calib = calibration_data(ctx)
    step = cached_step(
        ctx.artifacts_dir,
        "ov-int8-nncf",
        lambda d: nncf_int8(ir["path"], d, calib, transformer=is_transformer(ctx)),
    )
    return {**step, "exporter": onnx_fp32["exporter"]}


_NUMPY_TYPES = {"f32": np.float32, "i64": np.int64, "i32": np.int32, "f16": np.float16}


class OpenVinoRunner:
    def __init__(self, compiled: Any, settings: dict[str, Any]) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.settings = settings
        self.inputs = [
            (p.get_any_name(), _NUMPY_TYPES.get(p.get_element_type().get_type_name()))
            for p in compiled.inputs
        ]

    def prepare(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return map_inputs(batch, self.inputs)

    def run(self, prepared: dict[str, np.ndarray]) -> Any:
        return self.request.infer(prepared)

    def to_numpy(self, output: Any) -> np.ndarray:
        return np.asarray(output[0], dtype=np.float32)

    def new_stream(self) -> Any:
        """An infer request of its own: one request serves one call at a time."""
        return self.compiled.create_infer_request().infer


def _plain(value: Any) -> Any:
    """OpenVINO properties come back as its own types; store them as plain values."""
    if hasattr(value, "get_type_name"):  # ov.Type, e.g. f32
        return value.get_type_name()
    if isinstance(value, (int, float, str, bool)):
        return value
    return getattr(value, "name", str(value))  # enums such as PerformanceMode.LATENCY


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> OpenVinoRunner:
    import openvino as ov

    check_options(ctx.options, OPTIONS, RUNTIME)
    core = ov.Core()
    config = {
        # Always explicit: left alone, OpenVINO runs FP32 models in bf16 on CPUs
        # with BF16 support. A candidate may ask for bf16/f16 on purpose.
        "INFERENCE_PRECISION_HINT": str(ctx.options.get("inference_precision", "f32")),
        # Threads for the whole compiled model: `ctx.threads` per stream.
        "INFERENCE_NUM_THREADS": ctx.threads * ctx.streams,
        "NUM_STREAMS": int(ctx.options.get("num_streams", ctx.streams)),
        "PERFORMANCE_HINT": str(ctx.options.get("performance_hint", "LATENCY")),
    }
    compiled = core.compile_model(core.read_model(artifact["path"]), "CPU", config)
    settings: dict[str, Any] = {"openvino_version": ov.get_version(), "device": "CPU"}
    for key in config:  # record what OpenVINO actually applied, not what we asked for
        settings[key] = _plain(compiled.get_property(key))
    settings["exporter"] = artifact.get("exporter")
    if "quantization" in artifact:
        settings["quantization"] = artifact["quantization"]
    return OpenVinoRunner(compiled, settings)
