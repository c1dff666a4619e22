"""Keras 3 models (kind = "keras"): loaded in a worker, on the Keras backend it asks for.

Keras picks its backend once, when it is first imported, from KERAS_BACKEND (or
the user's ~/.keras/keras.json when the variable is unset). Every worker that
loads a Keras model therefore sets KERAS_BACKEND itself, before keras is
imported, so a candidate named keras-jax really runs on JAX whatever the
user's defaults say. The orchestrator never imports keras.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from bakeoff.source import ModelSource

KERAS_BACKENDS = ("jax", "tensorflow", "torch")
# The model files Keras 3 loads: its own .keras zip, and the legacy HDF5 files of
# tf.keras / Keras 2 (through Keras 3's legacy loader, with the same safe mode).
KERAS_FILE_SUFFIXES = (".keras", ".h5", ".hdf5")
# Keras' mixed precision policy for bf16 variants: bf16 compute, float32 variables.
BF16_POLICY = "mixed_bfloat16"


def set_keras_backend(backend: str) -> Any:
    """Select `backend` for this process and import keras; refuse a clash.

    Must run before keras is first imported in the process: Keras cannot switch
    backends afterwards without reloading every module (which leaves objects of
    the old backend behind), so a clash is an error rather than a silent mix.
    """
    if backend not in KERAS_BACKENDS:
        raise ValueError(f"unknown Keras backend {backend!r}; expected one of {KERAS_BACKENDS}")
    if "keras" in sys.modules:
        import keras

        current = keras.backend.backend()
        if current != backend:
            raise RuntimeError(
                f"keras was already imported in this process with the {current!r} backend, "
                f"so it cannot run on {backend!r}; load Keras models for each backend in "
                "a process of its own (set KERAS_BACKEND before keras is first imported)"
            )
        return keras
    os.environ["KERAS_BACKEND"] = backend
    import keras

    return keras


def load_keras_model(source: ModelSource, backend: str, weights: str | None = None) -> Any:
    """The workload's Keras model on `backend` (one of KERAS_BACKENDS).

    A file (.keras, or a legacy .h5 / .hdf5) is loaded with ``safe_mode=True``:
    Keras then refuses to deserialize lambdas (arbitrary code) from a user's file
    (the workload checks refuse them before, from the file's config). A factory is
    the user's own code, called after the backend is set; `weights` (a ``.weights.h5`` saved
    by a build step) replaces its initial weights, so every backend and every
    export runs the same numbers even when the factory initialises randomly.
    """
    if source.kind != "keras":
        raise ValueError(f"load_keras_model needs a kind = 'keras' model, got {source.kind!r}")
    keras = set_keras_backend(backend)
    if source.path is not None:
        if not source.path.lower().endswith(KERAS_FILE_SUFFIXES):
            raise ValueError(
                f"{source.path}: Keras models load from a .keras file (model.save("
                "'model.keras')) or a legacy .h5 / .hdf5 file; a SavedModel folder is "
                'kind = "savedmodel"'
            )
        try:
            return keras.saving.load_model(source.path, compile=False, safe_mode=True)
        except ValueError as exc:
            if "safe_mode" in str(exc) or "lambda" in str(exc).lower():
                raise ValueError(
                    f"{source.path}: the model contains a Lambda layer or other serialized "
                    "code, which bakeoff never deserializes from a file (safe_mode=True); "
                    'give it as factory = "module:callable" returning the model instead'
                ) from exc
            raise
    if source.factory is None:
        raise ValueError('kind = "keras" needs path = "model.keras" or factory = "module:callable"')
    from bakeoff.source import import_factory

    make = import_factory(source.factory, source.base_dir, "model", "model.factory")
    model = make()
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"model.factory = {source.factory!r} returned {type(model).__name__}, not a keras.Model"
        )
    if weights is not None:
        model.load_weights(weights)
    return model


def ensure_built(model: Any, example: dict[str, Any]) -> None:
    """Call the model once: Keras exporters need a model that has been called (a
    freshly loaded one has built weights but no traced call)."""
    model(model_inputs(model, example), training=False)


def model_inputs(model: Any, batch: dict[str, Any]) -> Any:
    """The batch in the form the model takes: one array, or several by input name
    (else by position)."""
    arrays = list(batch.values())
    if len(arrays) == 1:
        return arrays[0]
    names = [str(getattr(t, "name", "")) for t in getattr(model, "inputs", None) or []]
    if names and set(names) <= set(batch):
        return {n: batch[n] for n in names}
    return arrays


def with_policy(model: Any, policy: str) -> Any:
    """A copy of `model` whose layers compute under `policy` (e.g. mixed_bfloat16).

    A loaded model keeps the dtype its layers were saved with, so the global
    policy alone changes nothing; the layers are rebuilt from their configs
    with the new dtype and given the same weights (variables stay float32).
    """
    import keras

    def clone(layer: Any) -> Any:
        config = layer.get_config()
        if "dtype" in config and not isinstance(layer, keras.layers.InputLayer):
            config["dtype"] = policy
        return layer.__class__.from_config(config)

    try:
        copy = keras.models.clone_model(model, clone_function=clone)
    except Exception as exc:  # subclassed models cannot be cloned layer by layer
        raise ValueError(
            f"cannot apply the Keras dtype policy {policy!r}: the model could not be cloned "
            f"layer by layer ({type(exc).__name__}: {exc}); a Sequential or functional model "
            "is needed"
        ) from exc
    copy.set_weights(model.get_weights())
    return copy
