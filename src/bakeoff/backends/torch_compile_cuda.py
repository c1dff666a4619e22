"""torch.compile (inductor, Triton kernels) on an NVIDIA GPU: FP32 and FP16/BF16 autocast.
Compilation happens on the first call (cold start), never in steady-state latency; every
call ends with torch.cuda.synchronize."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant, gpu
from bakeoff.backends.common import check_options

RUNTIME = "torch-compile-cuda"


def availability() -> Availability:
    return gpu.torch_cuda_availability()


def offers(precision: str, model_kind: str) -> list[Offer]:
    return gpu.torch_cuda_offers(RUNTIME, precision, model_kind)


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    return {}


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
