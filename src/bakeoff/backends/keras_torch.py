"""Keras 3 on the PyTorch backend: the Keras model is a torch.nn.Module, run eagerly
as Keras does by default on torch, or with ``options = { jit_compile = true }``
through torch.compile (Keras' JAX and TensorFlow backends compile with XLA by
default; on torch, eager calls cost several times more for small models)."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import LoadContext, Variant
from bakeoff.backends.common import check_options
from bakeoff.backends.keras_common import KerasOnBackend, KerasRunner, load_keras

RUNTIME = "keras-torch"
BACKEND = "torch"
OPTIONS = {"threads", "jit_compile"}
# availability, offers and build as every Keras backend has them
_ON_BACKEND = KerasOnBackend(RUNTIME, BACKEND, dist="torch", module="torch")
availability, offers, build = _ON_BACKEND.availability, _ON_BACKEND.offers, _ON_BACKEND.build


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> KerasRunner:
    check_options(ctx.options, OPTIONS, RUNTIME)
    from bakeoff.backends.torch_eager import set_torch_threads

    model, settings = load_keras(variant, artifact, ctx, BACKEND)
    settings.update(set_torch_threads(ctx.threads))  # also turns autograd off
    import torch

    jit_compile = ctx.options.get("jit_compile", False)
    if not isinstance(jit_compile, bool):
        raise ValueError(f"option jit_compile: expected true or false, got {jit_compile!r}")
    # torch.compile compiles on the first call, which the worker times as first_call.
    forward = torch.compile(model) if jit_compile else model

    def call(x: Any) -> Any:
        # Torch on the CPU is synchronous: the result is complete on return.
        return forward(x, training=False)

    settings["compiled"] = jit_compile
    if jit_compile:
        settings["compile_backend"] = "inductor"
    return KerasRunner(model, settings, torch.from_numpy, call)
