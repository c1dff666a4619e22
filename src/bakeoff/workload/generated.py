"""Inputs made from a model's own signature, for a model given with no data.

A user's first run is often a model file alone. Its inputs are read from the file
(ONNX: the graph's inputs; OpenVINO IR, a TensorFlow SavedModel and a TFLite file,
read by OpenVINO without TensorFlow: the model's parameters; Keras: the input layers in the
config.json of its zip, nothing in the file loaded or run) and filled by stated
rules, so the run measures the model at the shapes it was made for:

- the first axis is the batch (the samples are on it), dynamic or not: a file that
  fixes it (a TFLite file at batch 1) still gets every sample, each runtime resizing
  the batch where it can;
- every other dynamic axis is `sequence_length` long (128 unless the workload says);
- a float input is standard normal; a bool input is random;
- an integer input named like a mask (`attention_mask`) is all ones, one named like
  a segment or token type is all zeros, one that indexes an embedding table (a
  Gather of a constant table) is uniform over that table's rows (the vocabulary),
  and any other is 0 or 1.

A Hugging Face folder has a tokenizer, so its generated inputs are text instead: the
sentences bakeoff ships, tokenized to `sequence_length` (workload/data.py).

The quality gate then compares every candidate with the reference on these inputs:
a drop on them is a real drop of the model, but the user's own data may show more,
which is why a run on generated inputs says so and names `--data`.
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.errors import UserError

__all__ = [
    "GENERATED_NOTE",
    "InputSignature",
    "generated_inputs",
    "signature_of",
]

GENERATED_NOTE = (
    "no data was given, so bakeoff made the inputs (from the model's signature; for a "
    "Hugging Face text model, its own sample sentences): the quality gate compared the "
    "candidates on them; pass --data FILE to check them on your own data"
)


@dataclass(frozen=True)
class InputSignature:
    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...]  # None: dynamic
    vocabulary: int | None = None  # rows of the embedding table it indexes, if any


def signature_of(model_path: str, origin: str) -> list[InputSignature]:
    """The model file's inputs; a UserError for a file that is no model."""
    path = Path(model_path)
    if path.is_dir() and (path / "saved_model.pb").is_file():
        what, read = "TensorFlow SavedModel", _openvino_signature  # OpenVINO reads it, no TF
    elif path.suffix.lower() in _READERS:
        what, read = _READERS[path.suffix.lower()]
    else:
        raise UserError(
            f"{origin}: generated inputs need an ONNX (.onnx), OpenVINO IR (.xml), TFLite "
            f"(.tflite) or Keras (.keras, .h5) file or a TensorFlow SavedModel folder, got "
            f"{model_path}; give the "
            "model's inputs as data (an .npz) instead"
        )
    try:
        found = read(model_path)
    except Exception as exc:
        gist = " ".join(str(exc).split())[:200]
        raise UserError(
            f"{origin}: {model_path} is not a readable {what} model "
            f"({type(exc).__name__}: {gist}); check the file, or export the model again"
        ) from None
    if not found:  # a protobuf that parses, with an empty graph: no model to run
        raise UserError(
            f"{origin}: {model_path} has no inputs, so it is no model bakeoff can run "
            "(an empty or cut-short file?); check the file, or export the model again"
        )
    return found


def _onnx_signature(path: str) -> list[InputSignature]:
    import onnx
    from onnx import helper

    graph = onnx.load(path, load_external_data=False).graph
    initializers = {t.name: tuple(t.dims) for t in graph.initializer}
    # An integer input that feeds a Gather of a constant table (directly or through a
    # Cast) indexes that table: its rows are the vocabulary.
    casts = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Cast"}
    vocabulary: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "Gather" and node.input[0] in initializers:
            index = casts.get(node.input[1], node.input[1])
            rows = initializers[node.input[0]][0]
            vocabulary[index] = max(vocabulary.get(index, 0), int(rows))
    found = []
    for inp in graph.input:
        if inp.name in initializers:
            continue
        tensor = inp.type.tensor_type
        dims = tuple(
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            for d in tensor.shape.dim
        )
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        found.append(InputSignature(inp.name, dtype, dims, vocabulary.get(inp.name)))
    return found


def _openvino_signature(path: str) -> list[InputSignature]:
    import openvino as ov

    model = ov.Core().read_model(path)
    vocabulary: dict[str, int] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Gather":
            continue
        # through a Convert: of an index's type, or of a table saved compressed to FP16
        table, index = (_through_convert(op.input_value(i).get_node()) for i in (0, 1))
        if table.get_type_name() == "Constant" and index.get_type_name() == "Parameter":
            name = index.get_friendly_name()
            vocabulary[name] = max(vocabulary.get(name, 0), int(table.get_output_shape(0)[0]))
    found = []
    for port in model.inputs:
        shape = port.get_partial_shape()
        dims = tuple(d.get_length() if d.is_static else None for d in shape)
        dtype = np.dtype(port.get_element_type().to_dtype())
        name = port.get_any_name()
        node = port.get_node().get_friendly_name()
        found.append(InputSignature(name, dtype, dims, vocabulary.get(node)))
    return found


def _keras_signature(path: str) -> list[InputSignature]:
    return _keras_config_inputs(keras_model_config(path))


def keras_model_config(path: str) -> dict[str, Any]:
    """The model config a Keras file keeps as JSON: the config.json in a Keras 3 zip,
    or a legacy HDF5 file's `model_config` attribute (read with h5py, as Keras itself
    reads it). Nothing in the file is loaded or run."""
    if path.lower().endswith(".keras"):
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    else:
        import h5py

        with h5py.File(path, "r") as f:
            text = f.attrs.get("model_config")
        if text is None:
            raise ValueError("no model_config in it (a weights-only .h5, from save_weights?)")
        config = json.loads(text if isinstance(text, str) else bytes(text).decode())
    if not isinstance(config, dict):
        raise ValueError("its model config is not a JSON object")
    return config


def layers_with_code(config: dict[str, Any]) -> list[str]:
    """The names of the Lambda layers in a Keras model config, nested models' too: each
    holds serialized Python code, which must never be deserialized from a file."""
    found = []
    for layer in (config.get("config") or {}).get("layers") or []:
        if not isinstance(layer, dict):
            continue
        if layer.get("class_name") == "Lambda":
            found.append(str((layer.get("config") or {}).get("name", "?")))
        found += layers_with_code(layer)  # a nested Sequential or functional model
    return found


def _keras_config_inputs(config: dict[str, Any]) -> list[InputSignature]:
    """A functional model names its input layers; a Sequential one has one input (its
    InputLayer, or the shape it was built with). Keras 2 files write an input's shape
    as `batch_input_shape`, Keras 3 ones as `batch_shape`."""
    body = config.get("config") or {}
    layers = body.get("layers") or []
    input_layers = {
        layer["config"]["name"]: layer["config"]
        for layer in layers
        if layer.get("class_name") == "InputLayer"
    }
    vocabulary = _keras_vocabulary(layers)
    if config.get("class_name") == "Sequential":
        first = next(iter(input_layers.values()), None)
        built = next((x.get("config") or {} for x in layers), {})
        if first is not None:
            shape, dtype, name = _batch_shape(first), first.get("dtype"), first["name"]
        elif _batch_shape(built):  # Keras 2: the first layer says the input's shape
            shape, dtype, name = _batch_shape(built), built.get("dtype"), "input"
        else:
            shape = body.get("build_input_shape") or (config.get("build_config") or {}).get(
                "input_shape"
            )
            dtype, name = "float32", "input"
        if shape is None:
            return []  # never built: its inputs are unknown
        embedding: dict[str, Any] = next(
            (x for x in layers if x.get("class_name") != "InputLayer"), {}
        )
        rows = (embedding.get("config") or {}).get("input_dim")
        rows = rows if embedding.get("class_name") == "Embedding" else None
        return [InputSignature(name, _keras_dtype(dtype), _keras_dims(shape), rows)]
    entries = body.get("input_layers") or []
    if entries and isinstance(entries[0], str):  # one input: [name, 0, 0], not a list of them
        entries = [entries]
    order = [entry[0] for entry in entries]
    return [
        InputSignature(
            name,
            _keras_dtype(input_layers[name].get("dtype")),
            _keras_dims(_batch_shape(input_layers[name]) or []),
            vocabulary.get(name),
        )
        for name in order
        if name in input_layers
    ]


def _batch_shape(layer_config: dict[str, Any]) -> Any:
    return layer_config.get("batch_shape") or layer_config.get("batch_input_shape")


def _keras_vocabulary(layers: list[dict[str, Any]]) -> dict[str, int]:
    """Input name -> the rows of the Embedding it feeds directly."""
    found: dict[str, int] = {}
    for layer in layers:
        if layer.get("class_name") != "Embedding":
            continue
        for node in layer.get("inbound_nodes") or []:
            for arg in node.get("args") or []:
                history = (
                    (arg.get("config") or {}).get("keras_history")
                    if isinstance(arg, dict)
                    else None
                )
                if history:
                    found[history[0]] = int(layer["config"]["input_dim"])
    return found


def _keras_dtype(dtype: Any) -> np.dtype:
    if isinstance(dtype, dict):  # a DTypePolicy
        dtype = (dtype.get("config") or {}).get("name", "float32")
    return np.dtype(dtype or "float32")


def _keras_dims(shape: list[int | None]) -> tuple[int | None, ...]:
    return tuple(d if isinstance(d, int) and d > 0 else None for d in shape)


def _through_convert(node: Any) -> Any:
    return node.input_value(0).get_node() if node.get_type_name() == "Convert" else node


def _tflite_signature(path: str) -> list[InputSignature]:
    """A quantized integer input stands for real values (backends.tflite_io): those are
    generated, as for a float input, and quantized with the file's parameters."""
    from bakeoff.backends.tflite_io import io_quantization

    found = _openvino_signature(path)
    quantized = io_quantization(path)[0]
    if len(quantized) != len(found):
        return found
    return [
        dataclasses.replace(inp, dtype=np.dtype(np.float32)) if q is not None else inp
        for inp, q in zip(found, quantized, strict=True)
    ]


# File suffix -> what the file is, and its reader.
_READERS = {
    ".onnx": ("ONNX", _onnx_signature),
    ".xml": ("OpenVINO IR", _openvino_signature),
    ".tflite": ("TFLite", _tflite_signature),  # OpenVINO's TFLite frontend: no TensorFlow
    ".keras": ("Keras", _keras_signature),
    ".h5": ("Keras HDF5", _keras_signature),
    ".hdf5": ("Keras HDF5", _keras_signature),
}


def generated_inputs(
    signature: list[InputSignature], samples: int, sequence_length: int, seed: int
) -> dict[str, np.ndarray]:
    """`samples` samples of every input, by the rules in this module's docstring."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for inp in signature:
        shape = tuple(
            samples if i == 0 else (sequence_length if d is None else d)
            for i, d in enumerate(inp.dims)
        )
        arrays[inp.name] = np.asarray(_fill(inp, shape, rng))
    return arrays


def _fill(inp: InputSignature, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    name = inp.name.lower()
    if inp.dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(inp.dtype, np.floating):
        return rng.standard_normal(shape).astype(inp.dtype)
    if "mask" in name:
        return np.ones(shape, dtype=inp.dtype)
    if "token_type" in name or "segment" in name:
        return np.zeros(shape, dtype=inp.dtype)
    high = inp.vocabulary or 2
    return rng.integers(0, high, size=shape).astype(inp.dtype)
