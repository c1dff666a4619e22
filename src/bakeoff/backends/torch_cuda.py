"""PyTorch eager on an NVIDIA GPU: FP32, and FP16/BF16 by CUDA autocast. Each call ends with
torch.cuda.synchronize, and the device memory peak (torch.cuda.max_memory_allocated) is in the
settings. Unavailable, with the reason, where there is no CUDA device."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant, gpu
from bakeoff.backends.common import check_options

RUNTIME = "torch-cuda"


def availability() -> Availability:
    return gpu.torch_cuda_availability()


def offers(precision: str, model_kind: str) -> list[Offer]:
    return gpu.torch_cuda_offers(RUNTIME, precision, model_kind)


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    return {}  # the model is rebuilt from its source inside the worker


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> gpu.TorchCudaRunner:
    check_options(ctx.options, {"threads"}, RUNTIME)
    model, device, settings = gpu.torch_cuda_model(variant, ctx)
    if variant.method == "autocast":
        settings["autocast"] = variant.precision
    return gpu.TorchCudaRunner(gpu.with_cuda_autocast(model, variant.precision), device, settings)
