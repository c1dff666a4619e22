"""The model a spec names, checked on disk before anything is built.

A missing file, a folder that is not what its kind needs, a weights file that
would have to be unpickled, a model folder that ships its own code: each is
refused here, once, with the key that named it, rather than in every worker.
None of these imports a framework beyond what its model kind needs anyway.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bakeoff.errors import UserError
from bakeoff.source import on_path
from bakeoff.user_files import read_npz
from bakeoff.workload.spec import DEFAULT_HF_TASK, ModelSpec, resolve_path


def check_model_path(model: ModelSpec, base_dir: str | None, origin: str) -> str | None:
    if model.path is None:
        return None
    resolved = resolve_path(base_dir, model.path)
    key = f"{origin}: model.path = {model.path!r}"
    if not resolved.exists():
        raise UserError(f"{key}: {resolved} does not exist")
    if model.kind == "hf":
        if not resolved.is_dir():
            raise UserError(
                f'{key}: {resolved} is not a folder (kind = "hf" needs a local Hugging Face '
                "model folder with config.json and the weights)"
            )
        if not (resolved / "config.json").is_file():
            raise UserError(
                f"{key}: {resolved} has no config.json: not a Hugging Face model folder"
            )
    if model.kind == "savedmodel" and not (resolved / "saved_model.pb").is_file():
        raise UserError(
            f"{key}: {resolved} is not a TensorFlow SavedModel folder (no saved_model.pb in it;"
            " write one with tf.saved_model.save or model.export)"
        )
    if model.kind == "keras":
        _check_keras_file(resolved, key)
    if model.kind == "tflite":
        _check_tflite_file(resolved, key)
    if model.kind == "openvino":
        weights = resolved.with_suffix(".bin")
        if not resolved.is_file():
            raise UserError(f"{key}: {resolved} is not a file")
        if not weights.is_file():
            raise UserError(
                f"{key}: the weights file {weights} is missing (an OpenVINO IR is a .xml "
                "with a .bin of the same name next to it)"
            )
    return str(resolved)


# A TFLite flatbuffer names its schema in the file identifier, bytes 4..8 (after
# the root table's offset): read without LiteRT, which the orchestrator may lack.
TFLITE_IDENTIFIER = b"TFL3"


def _check_tflite_file(path: Path, key: str) -> None:
    if not path.is_file():
        raise UserError(f'{key}: {path} is not a file (kind = "tflite" needs a .tflite file)')
    with path.open("rb") as f:
        head = f.read(8)
    if head[4:8] != TFLITE_IDENTIFIER:
        raise UserError(
            f"{key}: {path} is not a TFLite flatbuffer (its bytes 4..8 are {head[4:8]!r}, not "
            f"{TFLITE_IDENTIFIER!r}); write it with TensorFlow's or ai-edge-torch's converter"
        )


def _check_keras_file(path: Path, key: str) -> None:
    """A Keras file whose config is readable and holds no serialized code (read, never
    loaded: the orchestrator imports no Keras)."""
    from bakeoff.workload.generated import keras_model_config, layers_with_code

    try:
        config = keras_model_config(str(path))
    except Exception as exc:  # not a zip / not HDF5 / no config: say what was found
        gist = " ".join(str(exc).split())[:200]
        raise UserError(
            f"{key}: {path} is not a readable Keras model file ({type(exc).__name__}: {gist})"
        ) from None
    lambdas = layers_with_code(config)
    if lambdas:
        raise UserError(
            f"{key}: refused: the model holds Lambda layer(s) {', '.join(lambdas)}, Python "
            "code that bakeoff never deserializes from a file (Keras safe_mode); build the "
            'model in your own code instead: factory = "module:callable" returning it'
        )


def _existing_file(base_dir: str | None, value: str, key: str) -> Path:
    resolved = resolve_path(base_dir, value)
    if not resolved.is_file():
        raise UserError(f"{key} = {value!r}: {resolved} does not exist")
    return resolved


def check_model_files(model: ModelSpec, base_dir: str | None, origin: str) -> None:
    """Every file the [model] section names is there (its path, weights, jax params),
    checked as a run checks them but without reading them: what `bakeoff advise`,
    which loads nothing, checks before it advises."""
    check_model_path(model, base_dir, origin)
    for key, value in (("model.weights", model.weights), ("model.params", model.params)):
        if value is not None:
            _existing_file(base_dir, value, f"{origin}: {key}")


def check_weights(model: ModelSpec, base_dir: str | None, origin: str) -> str | None:
    """Refuse a weights file here, before any build, rather than in every worker.

    A pickle-based file is opened with torch's weights-only unpickler, which
    refuses anything but tensors and plain containers without running it; torch
    is imported for this only (kind = "torch" workloads import it with their
    factory anyway). With `weights_key`, the key path is followed in the file and
    what it reaches is checked the same way. Whether the keys fit the architecture
    needs the model, which only workers build: that check comes with the reference
    build.
    """
    if model.weights is None:
        return None
    resolved = _existing_file(base_dir, model.weights, f"{origin}: model.weights")
    from bakeoff.models import check_weights_file, weights_where

    where = weights_where(f"{origin}: ", model.weights, model.weights_key)
    check_weights_file(str(resolved), where, model.weights_key)
    return str(resolved)


def check_hf_folder(model: ModelSpec, folder: str, origin: str) -> tuple[Any, list[str]]:
    """The folder's config, read without running any code it ships; and notes for the user."""
    from transformers import AutoConfig

    key = f"{origin}: model.path = {model.path!r}"
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # transformers raises ValueError, OSError or KeyError here
        text = str(exc)
        if "trust_remote_code" in text or "custom code" in text:
            raise UserError(
                f"{key}: this model needs code shipped in its folder (trust_remote_code); "
                "bakeoff never runs a model folder's own code. Use a model type built into "
                'transformers, or give the model as kind = "torch" with your own factory.'
            ) from None
        raise UserError(
            f"{key}: cannot read its config.json: {type(exc).__name__}: {exc}"
        ) from None
    notes: list[str] = []
    if (model.task or DEFAULT_HF_TASK) == "sequence-classification":
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES as with_head,
        )

        if config.model_type not in with_head:
            raise UserError(
                f"{key}: task = 'sequence-classification': transformers has no sequence "
                f"classification model for model_type {config.model_type!r}"
            )
        architectures = list(getattr(config, "architectures", None) or [])
        if any(a.endswith("ForSequenceClassification") for a in architectures):
            if model.num_labels is not None and model.num_labels != config.num_labels:
                raise UserError(
                    f"{origin}: model.num_labels = {model.num_labels}, but the folder's trained "
                    f"classification head has {config.num_labels} labels; leave num_labels out"
                )
        else:
            n = model.num_labels or config.num_labels
            notes.append(
                f"model.path = {model.path!r} has no trained sequence-classification head "
                f"(its config lists {architectures or 'no architectures'}): bakeoff adds one "
                f"with {n} labels, UNTRAINED, initialised from a fixed seed so every process "
                "builds the same one. Its predictions mean nothing; the agreement gate still "
                "shows whether a runtime or precision changes the model's decisions."
            )
    return config, notes


def check_jax_model(model: ModelSpec, base_dir: str | None, origin: str) -> str:
    """The params file, checked without importing jax (or the user's module, which
    imports it) in this process: the function itself is looked up in the worker."""
    import importlib.util

    assert model.function is not None and model.params is not None
    module_name = model.function.partition(":")[0]
    with on_path(base_dir):
        try:
            found = importlib.util.find_spec(module_name) is not None
        except (ImportError, ValueError):
            found = False
    if not found:
        where = f" (looked next to the workload, in {base_dir})" if base_dir else ""
        raise UserError(
            f"{origin}: model.function = {model.function!r}: no module {module_name!r}{where}"
        )
    resolved = _existing_file(base_dir, model.params, f"{origin}: model.params")
    key = f"{origin}: model.params = {model.params!r}"
    if resolved.suffix == ".npz":
        read_npz(resolved, f"{key} ({resolved})")  # every array read: none unpickled
    return str(resolved)
