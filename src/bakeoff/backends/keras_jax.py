"""Keras 3 on the JAX backend: the forward pass as one jax.jit-compiled function."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import LoadContext, Variant
from bakeoff.backends.common import check_options
from bakeoff.backends.keras_common import KerasOnBackend, KerasRunner, load_keras

RUNTIME = "keras-jax"
BACKEND = "jax"
OPTIONS = {"threads"}
# availability, offers and build as every Keras backend has them
_ON_BACKEND = KerasOnBackend(RUNTIME, BACKEND, dist="jax", module="jax")
availability, offers, build = _ON_BACKEND.availability, _ON_BACKEND.offers, _ON_BACKEND.build


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> KerasRunner:
    check_options(ctx.options, OPTIONS, RUNTIME)
    from bakeoff.jax_platform import set_platform

    # Before jax is first imported (by Keras): the CPU, and XLA's threads.
    platform = set_platform("cpu", ctx.threads)
    model, settings = load_keras(variant, artifact, ctx, BACKEND)
    import jax

    # stateless_call under jax.jit is what Keras' own predict step compiles;
    # calling it directly skips predict's per-call data pipeline.
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    @jax.jit
    def forward(trainable: Any, non_trainable: Any, x: Any) -> Any:
        return model.stateless_call(trainable, non_trainable, x, training=False)[0]

    def call(x: Any) -> Any:
        # jax dispatches asynchronously: wait for the result so timing includes it.
        return jax.block_until_ready(forward(trainable, non_trainable, x))

    settings.update(
        {
            "jax_version": jax.__version__,
            "jit": "jax.jit(model.stateless_call)",
            "devices": [str(d) for d in jax.devices()],
            **platform,
        }
    )
    return KerasRunner(model, settings, jax.device_put, call)
