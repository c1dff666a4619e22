"""ONNX Runtime on the CUDA execution provider: FP32, and FP16 (the graph converted to float16,
as for the CPU provider). `session.run` takes and returns host arrays, so each timed call
includes the host<->device copies and returns only when the result is back on the host.

Needs onnxruntime-gpu, which replaces the CPU-only onnxruntime package (they cannot be
installed side by side). After the session is created, the provider list is checked: ONNX
Runtime silently falls back to the CPU when CUDA cannot be loaded, and a CPU run must not be
reported as a GPU one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant, gpu
from bakeoff.backends import onnxruntime as ort_cpu
from bakeoff.backends.common import check_options
from bakeoff.tensors import ONNX_NUMPY_TYPES, map_inputs

RUNTIME = "onnxruntime-cuda"
INSTALL = "pip uninstall -y onnxruntime && pip install onnxruntime-gpu==1.31.1"


def availability() -> Availability:
    return gpu.cuda_availability("onnxruntime-gpu", "onnxruntime", INSTALL)


def ort_gpu_offers(runtime: str, precision: str, model_kind: str) -> list[Offer]:
    if model_kind not in ("torch", "hf", "onnx"):
        return [Offer(Variant(runtime, precision), f"the model is {model_kind}, not ONNX-able")]
    if precision in ("fp32", "fp16"):
        return [Offer(Variant(runtime, precision))]
    return [
        Offer(
            Variant(runtime, precision),
            f"{precision} on {runtime} is not built by this version; see tensorrt",
        )
    ]


def offers(precision: str, model_kind: str) -> list[Offer]:
    return ort_gpu_offers(RUNTIME, precision, model_kind)


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    # The same ONNX files as the CPU provider: the FP32 export, or its float16 conversion.
    return ort_cpu.build(variant, ctx)


class OrtGpuRunner:
    settings = gpu.DEVICE_MEMORY_SETTINGS

    def __init__(self, session: Any, settings: dict[str, Any]) -> None:
        self.session, self._settings = session, settings
        self.inputs = [(i.name, ONNX_NUMPY_TYPES.get(i.type)) for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]

    def prepare(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return map_inputs(batch, self.inputs)

    def run(self, prepared: dict[str, np.ndarray]) -> Any:
        return self.session.run(None, prepared)  # synchronous: outputs copied to the host

    def to_numpy(self, output: Any) -> np.ndarray:
        return np.asarray(output[0], dtype=np.float32)

    def named_outputs(self, output: Any) -> list[tuple[str, Any]]:
        return list(zip(self.output_names, output, strict=True))


def gpu_session(
    path: str, providers: list[Any], wanted: str, ctx: LoadContext
) -> tuple[Any, dict[str, Any]]:
    """A session whose first provider really is `wanted`, else a clear error."""
    import onnxruntime as ort

    have = ort.get_available_providers()
    if wanted not in have:
        raise RuntimeError(
            f"onnxruntime {ort.__version__} has no {wanted} (available: {', '.join(have)}); "
            f"install onnxruntime-gpu: {INSTALL}"
        )
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ctx.threads
    opts.log_severity_level = 3
    session = ort.InferenceSession(path, opts, providers=providers)
    used = session.get_providers()
    if not used or used[0] != wanted:
        raise RuntimeError(
            f"ONNX Runtime did not put the session on {wanted} (it uses {used}): the CUDA "
            "libraries it needs (CUDA, cuDNN, and TensorRT for its provider) did not load"
        )
    return session, {
        "onnxruntime_version": ort.__version__,
        "providers": used,
        "gpu": gpu.gpu_info(),
        "intra_op_threads": ctx.threads,
        "sync": "session.run returns host arrays (copies included in the timing)",
    }


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> OrtGpuRunner:
    check_options(ctx.options, {"threads"}, RUNTIME)
    session, settings = gpu_session(
        artifact["path"],
        [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"],
        "CUDAExecutionProvider",
        ctx,
    )
    settings["exporter"] = artifact.get("exporter")
    return OrtGpuRunner(session, settings)
