"""torch.compile (inductor) on the CPU. Compilation happens on the first call, so it
is recorded as part of the cold start, never in steady-state latency."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends import torch_eager as eager

RUNTIME = "torch-compile"


def availability() -> Availability:
    return eager.availability()


def offers(precision: str, model_kind: str) -> list[Offer]:
    return eager.torch_offers(RUNTIME, precision, model_kind, int8=False)


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    return {}


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> eager.TorchRunner:
    import torch

    model, settings = eager.load_model(variant, ctx)
    compiled = torch.compile(model, backend="inductor", mode="default", dynamic=False)
    settings.update({"compile_backend": "inductor", "compile_mode": "default", "dynamic": False})
    return eager.TorchRunner(compiled, settings)
