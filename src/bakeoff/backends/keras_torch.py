"""Keras 3 on the PyTorch backend: the Keras model is a torch.nn.Module, run eagerly."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends.common import check_options
from bakeoff.backends.keras_common import (
    KerasRunner,
    keras_availability,
    keras_build,
    keras_offers,
    load_keras,
)

RUNTIME = "keras-torch"
BACKEND = "torch"
OPTIONS = {"threads"}


def availability() -> Availability:
    return keras_availability("torch", "torch")


def offers(precision: str, model_kind: str) -> list[Offer]:
    return keras_offers(RUNTIME, BACKEND, precision, model_kind)


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    return keras_build(variant, ctx, BACKEND)


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> KerasRunner:
    check_options(ctx.options, OPTIONS, RUNTIME)
    from bakeoff.backends.torch_eager import set_torch_threads

    model, settings = load_keras(variant, artifact, ctx, BACKEND)
    settings.update(set_torch_threads(ctx.threads))  # also turns autograd off
    import torch

    def call(x: Any) -> Any:
        # Eager torch on the CPU is synchronous: the result is complete on return.
        return model(x, training=False)

    settings["compiled"] = False
    return KerasRunner(model, settings, torch.from_numpy, call)
