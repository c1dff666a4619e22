"""Keras 3 on the TensorFlow backend: the forward pass as a tf.function, XLA by default."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import LoadContext, Variant
from bakeoff.backends.common import check_options
from bakeoff.backends.keras_common import KerasOnBackend, KerasRunner, load_keras

RUNTIME = "keras-tensorflow"
BACKEND = "tensorflow"
OPTIONS = {"threads", "jit_compile"}
# availability, offers and build as every Keras backend has them
_ON_BACKEND = KerasOnBackend(RUNTIME, BACKEND, dist="tensorflow-cpu", module="tensorflow")
availability, offers, build = _ON_BACKEND.availability, _ON_BACKEND.offers, _ON_BACKEND.build


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> KerasRunner:
    check_options(ctx.options, OPTIONS, RUNTIME)
    from bakeoff.keras_models import set_keras_backend

    set_keras_backend(BACKEND)
    import tensorflow as tf

    # Thread pools are fixed when TensorFlow's runtime starts: set them before any op.
    tf.config.threading.set_intra_op_parallelism_threads(ctx.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    model, settings = load_keras(variant, artifact, ctx, BACKEND)
    # Keras' own default (jit_compile="auto") compiles with XLA on this backend;
    # the option turns it off to compare with plain TensorFlow graphs.
    jit = bool(ctx.options.get("jit_compile", True))
    forward = tf.function(
        lambda x: model(x, training=False), jit_compile=jit, reduce_retracing=True
    )

    def call(x: Any) -> Any:
        # .numpy() waits for the result (and is the copy every caller needs).
        out = forward(x)
        return out.numpy() if hasattr(out, "numpy") else out

    settings.update(
        {
            "tensorflow_version": tf.__version__,
            "jit_compile": jit,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        }
    )
    return KerasRunner(model, settings, tf.convert_to_tensor, call)
