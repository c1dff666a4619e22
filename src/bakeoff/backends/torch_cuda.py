"""PyTorch eager on an NVIDIA GPU: FP32, and FP16/BF16 by CUDA autocast. Each call ends with
torch.cuda.synchronize, and the device memory peak (torch.cuda.max_memory_allocated) is in the
settings. Unavailable, with the reason, where there is no CUDA device."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import LoadContext, Variant, gpu
from bakeoff.backends.common import check_options

RUNTIME = "torch-cuda"

# availability, offers and build as every PyTorch-on-CUDA runtime has them
_ON_CUDA = gpu.TorchOnCuda(RUNTIME)
availability, offers, build = _ON_CUDA.availability, _ON_CUDA.offers, _ON_CUDA.build


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> gpu.TorchCudaRunner:
    check_options(ctx.options, {"threads"}, RUNTIME)
    model, device, settings = gpu.torch_cuda_model(variant, ctx)
    if variant.method == "autocast":
        settings["autocast"] = variant.precision
    return gpu.TorchCudaRunner(gpu.with_cuda_autocast(model, variant.precision), device, settings)
