"""Inputs made from a model's own signature, for a model given with no data.

A user's first run is often a model file alone. Its inputs are read from the file
(ONNX: the graph's inputs; OpenVINO IR: the model's parameters) and filled by
stated rules, so the run measures the model at the shapes it was made for:

- the first axis, where it is dynamic, is the batch (the samples are on it);
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
    suffix = Path(model_path).suffix
    readers = {".onnx": _onnx_signature, ".xml": _openvino_signature}
    if suffix not in readers:
        raise UserError(
            f"{origin}: generated inputs need an ONNX (.onnx) or OpenVINO IR (.xml) model, "
            f"got {model_path}; give the model's inputs as data (an .npz) instead"
        )
    try:
        found = readers[suffix](model_path)
    except Exception as exc:
        what = "ONNX" if suffix == ".onnx" else "OpenVINO IR"
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


def _through_convert(node: Any) -> Any:
    return node.input_value(0).get_node() if node.get_type_name() == "Convert" else node


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
