"""torch.compile (inductor, Triton kernels) on an NVIDIA GPU: FP32 and FP16/BF16 autocast.
Compilation happens on the first call (cold start), never in steady-state latency; every
call ends with torch.cuda.synchronize."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import LoadContext, Variant, gpu
from bakeoff.backends.common import check_options

RUNTIME = "torch-compile-cuda"

# availability, offers and build as every PyTorch-on-CUDA runtime has them
_ON_CUDA = gpu.TorchOnCuda(RUNTIME)
availability, offers, build = _ON_CUDA.availability, _ON_CUDA.offers, _ON_CUDA.build


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> gpu.TorchCudaRunner:
    import torch

    check_options(ctx.options, {"threads", "mode"}, RUNTIME)
    mode = str(ctx.options.get("mode", "default"))
    model, device, settings = gpu.torch_cuda_model(variant, ctx)
    compiled = torch.compile(model, backend="inductor", mode=mode)
    settings.update({"compile_backend": "inductor", "compile_mode": mode})
    # Autocast around the compiled call, as on the CPU: dynamo traces it into the graph.
    return gpu.TorchCudaRunner(
        gpu.with_cuda_autocast(compiled, variant.precision), device, settings
    )
