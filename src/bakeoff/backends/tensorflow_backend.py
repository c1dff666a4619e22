"""TensorFlow on the CPU: a SavedModel's serving signature (model kind "savedmodel") or a Keras
model on the TensorFlow backend (kind "keras"), called through `tf.function`, with XLA off
(`tensorflow-fp32`) and on (`tensorflow-fp32-xla`, jit_compile=True) as separate candidates.

Tracing (and, with XLA, compiling) happens on a first call made in `load` with a batch of the
run's real shape; its time is recorded as settings["compile_s"], never in steady-state latency.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends.common import check_options, package_availability
from bakeoff.batching import read_split
from bakeoff.tensors import map_inputs, sequence_output_name

RUNTIME = "tensorflow"
INSTALL = "pip install tensorflow-cpu==2.21.0 (or: make frameworks)"
OPTIONS = {"threads"}
KINDS = ("savedmodel", "keras")


def availability() -> Availability:
    a = package_availability("tensorflow-cpu", "tensorflow", INSTALL)
    # A CUDA machine has the full `tensorflow` distribution instead of tensorflow-cpu.
    return a if a.available else package_availability("tensorflow", "tensorflow", INSTALL)


def offers(precision: str, model_kind: str) -> list[Offer]:
    if model_kind not in KINDS:
        return [
            Offer(
                Variant(RUNTIME, precision),
                f"the model is {model_kind}; tensorflow runs a SavedModel or a Keras model",
            )
        ]
    if precision == "fp32":
        return [Offer(Variant(RUNTIME, "fp32")), Offer(Variant(RUNTIME, "fp32", "xla"))]
    return [
        Offer(
            Variant(RUNTIME, precision),
            f"{precision} is not built by this version: a SavedModel's signature has fixed "
            "float32 types (for low precision, convert the model to LiteRT or ONNX)",
        )
    ]


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    if ctx.source.kind == "keras":
        # The weights the keras-* candidates run (a factory's initial weights saved
        # once), so every candidate computes the same model.
        from bakeoff.backends.keras_common import keras_build

        return keras_build(variant, ctx, "tensorflow")
    return {}  # the worker loads the SavedModel itself


class TfRunner:
    def __init__(self, fn: Any, inputs: list[tuple[str, Any]], settings: dict[str, Any]) -> None:
        self.fn, self.inputs, self.settings = fn, inputs, settings
        self.output_names: list[str] = []  # known from the first call's structure

    def prepare(self, batch: dict[str, np.ndarray]) -> tuple[Any, ...]:
        import tensorflow as tf

        return tuple(tf.constant(v) for v in map_inputs(batch, self.inputs).values())

    def run(self, prepared: tuple[Any, ...]) -> list[np.ndarray]:
        out = self.fn(*prepared)
        # .numpy() waits for the result: the call is complete when run returns.
        if isinstance(out, dict):
            self.output_names = sorted(out)
            return [out[k].numpy() for k in self.output_names]
        if isinstance(out, list | tuple):
            self.output_names = [sequence_output_name(i) for i in range(len(out))]
            return [o.numpy() for o in out]
        self.output_names = [sequence_output_name(0)]
        return [out.numpy()]

    def to_numpy(self, output: list[np.ndarray]) -> np.ndarray:
        return np.asarray(output[0], dtype=np.float32)

    def named_outputs(self, output: list[np.ndarray]) -> list[tuple[str, Any]]:
        return list(zip(self.output_names, output, strict=True))


def _savedmodel(tf: Any, path: str) -> tuple[Any, list[tuple[str, Any]], Any]:
    loaded = tf.saved_model.load(path)
    signatures = dict(loaded.signatures)
    if "serving_default" not in signatures:
        raise ValueError(
            f"the SavedModel {path} has no serving_default signature "
            f"(it has: {', '.join(signatures) or 'none'})"
        )
    sig = signatures["serving_default"]
    specs = sig.structured_input_signature[1]
    names = sorted(specs)  # signature inputs are keyword arguments; fix one order
    inputs = [(n, specs[n].dtype.as_numpy_dtype) for n in names]

    def call(*args: Any) -> Any:
        return sig(**dict(zip(names, args, strict=True)))

    # `loaded` must stay referenced: the signature's variables live on it.
    return call, inputs, loaded


def _keras(ctx: LoadContext, artifact: dict[str, Any]) -> tuple[Any, list[tuple[str, Any]], Any]:
    from bakeoff.keras_models import load_keras_model, model_inputs

    model = load_keras_model(ctx.source, "tensorflow", artifact.get("weights"))
    names = list(ctx.input_names)
    inputs: list[tuple[str, Any]] = [(n, None) for n in names]

    def call(*args: Any) -> Any:
        return model(model_inputs(model, dict(zip(names, args, strict=True))), training=False)

    return call, inputs, model


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> TfRunner:
    check_options(ctx.options, OPTIONS, RUNTIME)
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")
    if ctx.source.kind == "keras":
        from bakeoff.keras_models import set_keras_backend

        set_keras_backend("tensorflow")  # before keras is first imported
    import tensorflow as tf

    # Thread pools are fixed when the runtime starts: set them before any op runs.
    tf.config.threading.set_intra_op_parallelism_threads(ctx.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if ctx.source.kind == "savedmodel":
        assert ctx.source.path is not None
        call, inputs, keep = _savedmodel(tf, ctx.source.path)
    elif ctx.source.kind == "keras":
        call, inputs, keep = _keras(ctx, artifact)
    else:
        raise ValueError(f"tensorflow runs a SavedModel or a Keras model, not {ctx.source.kind}")
    xla = variant.method == "xla"
    fn = tf.function(call, jit_compile=xla, reduce_retracing=True)
    runner = TfRunner(fn, inputs, {})
    runner.keep = keep  # type: ignore[attr-defined]
    settings: dict[str, Any] = {
        "tensorflow_version": tf.__version__,
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "jit_compile": xla,
        "xla": "on (jit_compile=True)" if xla else "off",
        "inputs": [name for name, _ in inputs],
    }
    if ctx.data_path:
        # Trace (and XLA-compile) for the run's batch shape now, timed apart.
        pool, layout = read_split(ctx.data_path, "pool", ctx.input_names)
        batch = layout.contiguous(layout.cut(pool, 0, ctx.batch_size))
        if layout.count(batch) == ctx.batch_size:
            prepared = runner.prepare(batch)
            t0 = time.perf_counter()
            runner.run(prepared)
            settings["compile_s"] = round(time.perf_counter() - t0, 6)
            settings["compile_note"] = "trace" + (" + XLA compile" if xla else "") + " + 1st call"
    runner.settings = settings
    return runner
