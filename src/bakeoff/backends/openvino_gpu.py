"""OpenVINO on its GPU plugin: the same IRs as the CPU candidates (FP32, FP16 by precision
hint, INT8 by NNCF), compiled for device "GPU". That plugin runs on Intel GPUs through
OpenCL (an NVIDIA GPU needs the separate openvino_contrib NVIDIA plugin, not on PyPI), so
availability looks for a DRM render node. `infer` is synchronous: it returns when the
result is on the host."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends import openvino as ov_cpu
from bakeoff.backends.common import check_options
from bakeoff.backends.openvino import OpenVinoRunner

RUNTIME = "openvino-gpu"
INSTALL = (
    "an Intel GPU with its OpenCL compute runtime (apt-get install intel-opencl-icd); "
    "then pip install openvino==2026.4.1"
)
_PRECISIONS = {"fp32": "f32", "fp16": "f16"}


def no_gpu_reason() -> str | None:
    if any(Path("/dev/dri").glob("renderD*")):
        return None
    return (
        "no GPU for OpenVINO's GPU plugin: it runs on Intel GPUs through OpenCL and /dev/dri "
        "has no render node (an NVIDIA GPU needs the openvino_contrib NVIDIA plugin, not on PyPI)"
    )


def availability() -> Availability:
    a = ov_cpu.availability()
    reason = no_gpu_reason()
    if reason is not None:
        return Availability(False, a.version, reason, INSTALL)
    return a


def offers(precision: str, model_kind: str) -> list[Offer]:
    cpu_offers = ov_cpu.offers(precision, model_kind)
    if any(o.reason and o.reason.startswith("the model is") for o in cpu_offers):
        return [Offer(Variant(RUNTIME, o.variant.precision), o.reason) for o in cpu_offers]
    if precision in _PRECISIONS:
        return [Offer(Variant(RUNTIME, precision))]
    if precision == "int8":  # plain NNCF INT8, the IR the CPU candidates use
        plain = next(o for o in cpu_offers if o.variant.method == "nncf")
        return [Offer(Variant(RUNTIME, "int8", "nncf"), plain.reason)]
    return [
        Offer(
            Variant(RUNTIME, precision),
            f"{precision} is not built for OpenVINO's GPU plugin by this version",
        )
    ]


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    # FP16 on the GPU is a precision hint on the FP32 IR, like on the CPU.
    return ov_cpu.build(Variant("openvino", variant.precision, variant.method), ctx)


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> OpenVinoRunner:
    import openvino as ov

    check_options(ctx.options, {"threads"}, RUNTIME)
    core = ov.Core()
    if "GPU" not in core.available_devices:
        raise RuntimeError(
            f"OpenVINO {ov.get_version()} sees no GPU device (devices: "
            f"{', '.join(core.available_devices)}); {INSTALL}"
        )
    hint = _PRECISIONS.get(variant.precision, "f32")
    config = {"INFERENCE_PRECISION_HINT": hint, "PERFORMANCE_HINT": "LATENCY"}
    compiled = core.compile_model(core.read_model(artifact["path"]), "GPU", config)
    settings: dict[str, Any] = {
        "openvino_version": ov.get_version(),
        "device": "GPU",
        "device_name": core.get_property("GPU", "FULL_DEVICE_NAME"),
        "INFERENCE_PRECISION_HINT": str(compiled.get_property("INFERENCE_PRECISION_HINT")),
        "exporter": artifact.get("exporter"),
        "sync": "infer request, synchronous",
    }
    with contextlib.suppress(RuntimeError):  # what the plugin holds on the device, by kind
        settings["device_memory"] = dict(core.get_property("GPU", "GPU_MEMORY_STATISTICS"))
    if "quantization" in artifact:
        settings["quantization"] = dict(artifact["quantization"])
    return OpenVinoRunner(compiled, settings)
