"""ONNX Runtime on the TensorRT execution provider (CUDA for what TensorRT does not take):
FP32, and FP16 through TensorRT's own precision flag on the FP32 graph. TensorRT builds its
engine on the first call, so that lands in the cold start, not in latency."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant, gpu
from bakeoff.backends import onnxruntime as ort_cpu
from bakeoff.backends.common import check_options, package_availability
from bakeoff.backends.onnxruntime_cuda import INSTALL, OrtGpuRunner, gpu_session, ort_gpu_offers

RUNTIME = "onnxruntime-tensorrt"
TRT_INSTALL = f"{INSTALL} tensorrt==11.4.0.106"


def availability() -> Availability:
    return gpu.cuda_availability(
        "onnxruntime-gpu",
        "onnxruntime",
        TRT_INSTALL,
        also=lambda: package_availability("tensorrt", "tensorrt", TRT_INSTALL),
    )


def offers(precision: str, model_kind: str) -> list[Offer]:
    return ort_gpu_offers(RUNTIME, precision, model_kind)


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    # FP16 is TensorRT's flag on the FP32 graph, not a converted file.
    return ort_cpu.build(Variant("onnxruntime", "fp32"), ctx)


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> OrtGpuRunner:
    check_options(ctx.options, {"threads"}, RUNTIME)
    trt_options = {"device_id": 0, "trt_fp16_enable": variant.precision == "fp16"}
    session, settings = gpu_session(
        artifact["path"],
        [
            ("TensorrtExecutionProvider", trt_options),
            ("CUDAExecutionProvider", {"device_id": 0}),
            "CPUExecutionProvider",
        ],
        "TensorrtExecutionProvider",
        ctx,
    )
    settings.update({"tensorrt_options": trt_options, "exporter": artifact.get("exporter")})
    return OrtGpuRunner(session, settings)
