"""torch.compile (inductor) on the CPU: FP32, BF16/FP16 autocast and INT4 weight-only,
as in eager. Compilation happens on the first call, so it is recorded as part of the
cold start, never in steady-state latency."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends import torch_eager as eager
from bakeoff.backends.common import check_options

RUNTIME = "torch-compile"
# dynamic=False compiles a static graph per new shape, in the call that meets it
# (timed as that batch size's first call), and keeps the earlier ones.
ANY_BATCH_SIZE = True
# Inductor compiles in the first call at each shape: tens of seconds.
COMPILES_WHEN_LOADED = True


def availability() -> Availability:
    return eager.availability()


def offers(precision: str, model_kind: str) -> list[Offer]:
    return eager.torch_offers(RUNTIME, precision, model_kind, int8=False)


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    return {}


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> eager.TorchRunner:
    import torch

    check_options(ctx.options, {"threads", "mode", "dynamic"}, RUNTIME)
    mode = str(ctx.options.get("mode", "default"))
    dynamic = bool(ctx.options.get("dynamic", False))
    model, settings = eager.load_model(variant, ctx)
    compiled = torch.compile(model, backend="inductor", mode=mode, dynamic=dynamic)
    from torch._inductor import config as inductor_config

    settings.update({"compile_backend": "inductor", "compile_mode": mode, "dynamic": dynamic})
    # What the first call's compile ran in (1 where it loaded beside other work).
    settings["compile_threads"] = inductor_config.compile_threads
    # Autocast around the compiled call: dynamo traces the ambient autocast state
    # into the graph (and guards on it), so inductor compiles the BF16/FP16 graph.
    return eager.TorchRunner(eager.with_autocast(compiled, variant.precision), settings)
