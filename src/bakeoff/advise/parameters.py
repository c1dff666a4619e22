"""Parameter counts read from a model's files, never by building or running it.

What counts, the same for every format: the elements of tensors of a floating type
(FP64 down to FP8/FP4) and of 8- and 4-bit integer types (weights stored compressed:
NNCF, bitsandbytes, a quantized TFLite file). Wider integers and booleans are
indices, counters, shapes and masks (BatchNorm's num_batches_tracked, BERT's
position_ids), not parameters. A state_dict holds buffers too: BatchNorm's
running mean and variance are floats and counted, as a file of weights cannot tell
them from parameters. In a graph (ONNX, OpenVINO IR, SavedModel, TFLite) a
one-element constant is an operator's setting (an epsilon, a scale), not a weight,
so only constants of more than one element count. A graph counts what the
converter left in it: OpenVINO folds a BatchNorm into the convolution before it,
and a compressed weight's scales and zero points are counted beside it (under 1%
of it, per channel or per group of 128).

Each reader reads what it must and no more: safetensors headers, Keras' HDF5
dataset shapes, torch's weights-only unpickler with the tensors memory-mapped,
OpenVINO's read_model (no compile; it reads SavedModel folders and TFLite files
too, so TensorFlow is never imported).
"""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# 8- and 4-bit integer type names as OpenVINO, ONNX, torch, safetensors and numpy
# spell them: weights stored compressed, counted as the parameters they stand for.
_LOW_BIT_INTEGERS = frozenset(
    {"i8", "u8", "i4", "u4", "int8", "uint8", "int4", "uint4", "qint8", "quint8", "quint4x2"}
)
# The weights inside a Keras 3 .keras archive (the rest is config and metadata).
KERAS_WEIGHTS = "model.weights.h5"


def counts_as_parameter(type_name: str) -> bool:
    """Whether a tensor of this element type holds parameters: floating types
    ("f32", "float16", "torch.bfloat16", "F8_E4M3", "double", "nf4") and 8- or 4-bit
    integers; not int32/int64 (indices, counters, shapes) nor booleans (masks)."""
    name = type_name.lower().removeprefix("torch.")
    return name.startswith(("f", "bf", "nf", "double")) or name in _LOW_BIT_INTEGERS


def _elements(shape: Iterable[Any]) -> int:
    size = 1
    for dim in shape:
        size *= int(dim)
    return size


def safetensors_params(files: list[Path]) -> int | None:
    """Element count from the headers: 8 bytes of length, then JSON; no tensor is read."""
    total = 0
    for f in files:
        try:
            with f.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error):
            return None
        for name, info in header.items():
            if name != "__metadata__" and counts_as_parameter(str(info.get("dtype", ""))):
                total += _elements(info.get("shape", []))
    return total


def state_dict_parameter_count(path: str, weights_key: str | None = None) -> int:
    """The elements of a .pt/.pth/.bin state_dict's tensors, loaded as `bakeoff run`
    loads it (models.py): torch.load(weights_only=True), which refuses a file that
    would run code, here memory-mapped so the tensors stay on disk. A UserError for
    a file that is no state_dict or is refused."""
    # models.py's own loader and check (torch's weights-only unpickler), so advice
    # refuses exactly what a run refuses.
    from bakeoff.models import state_dict_in, torch_load_weights_only, weights_where

    where = weights_where("", Path(path).name, weights_key)
    obj = torch_load_weights_only(path, where, mmap=zipfile.is_zipfile(path))
    state: dict[str, Any] = state_dict_in(obj, path, where, weights_key)
    seen: set[tuple[Any, ...]] = set()
    total = 0
    for tensor in state.values():
        if not counts_as_parameter(str(tensor.dtype)):
            continue
        # Tied weights (an embedding shared with the output layer) are two entries of
        # one storage; model.parameters() counts them once, and so does this.
        view = (
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
            tuple(tensor.stride()),
        )
        if view not in seen:
            seen.add(view)
            total += tensor.numel()
    return total


def weights_parameter_count(path: str, weights_key: str | None = None) -> tuple[int, str]:
    """A torch weights file's count and where it was read: a .safetensors header,
    or the tensors of a pickled state_dict."""
    if path.endswith(".safetensors"):
        n = safetensors_params([Path(path)])
        if n is None:
            raise ValueError(f"{Path(path).name} has no readable safetensors header")
        return n, "safetensors header"
    return state_dict_parameter_count(path, weights_key), "state_dict tensors"


def openvino_parameter_count(path: str) -> int:
    """The elements of the weight constants in what OpenVINO's read_model reads: an IR
    (.xml with its .bin), a SavedModel folder or a .tflite file. Nothing is compiled."""
    import openvino as ov

    model = ov.Core().read_model(path)
    total = 0
    for op in model.get_ops():
        if op.get_type_name() != "Constant":
            continue
        size = _elements(op.get_output_shape(0))
        if size > 1 and counts_as_parameter(op.get_element_type().get_type_name()):
            total += size
    return total


def tflite_parameter_count(path: str) -> int:
    """A .tflite file's weights: its constant tensors, read by OpenVINO's TFLite
    frontend (no TensorFlow, no LiteRT interpreter)."""
    return openvino_parameter_count(path)


def keras_parameter_count(path: str) -> int:
    """A Keras file's weights from its HDF5 datasets' shapes, no Keras loaded (nor
    the config, which may hold code): a .keras archive's model.weights.h5, or a
    legacy .h5 file's model_weights group."""
    import h5py  # Keras' own dependency: what it writes weights with

    if zipfile.is_zipfile(path):
        with (
            zipfile.ZipFile(path) as archive,
            archive.open(KERAS_WEIGHTS) as raw,
            h5py.File(raw, "r") as weights,
        ):
            return _hdf5_weights(weights)
    with h5py.File(path, "r") as legacy:
        return _hdf5_weights(legacy.get("model_weights", legacy))


def _hdf5_weights(root: Any) -> int:
    """The elements of the datasets under `root`, but the optimizer's: its slots
    (Adam's moments) and step counter are not the model's parameters."""
    import h5py

    total = 0

    def add(_name: str, item: Any) -> None:
        nonlocal total
        if isinstance(item, h5py.Dataset) and counts_as_parameter(str(item.dtype)):
            total += int(item.size)

    for name, item in root.items():
        if name in ("optimizer", "optimizer_weights"):
            continue
        if isinstance(item, h5py.Group):
            item.visititems(add)
        else:
            add(name, item)
    return total


def onnx_parameter_count(model: Any) -> int:
    """An onnx.ModelProto's weights: its initializers and Constant nodes' tensors
    (some exporters write weights so), by the same rule as any graph. External data
    stays on disk: the dimensions are in the protobuf."""
    from onnx import TensorProto

    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "Constant":
            tensors += [a.t for a in node.attribute if a.name == "value"]
    total = 0
    for tensor in tensors:
        size = _elements(tensor.dims)
        if size > 1 and counts_as_parameter(TensorProto.DataType.Name(tensor.data_type)):
            total += size
    return total


# kind -> (reader of its path, what params_source says)
_PATH_READERS = {
    "openvino": (openvino_parameter_count, "OpenVINO IR constants"),
    "savedmodel": (openvino_parameter_count, "SavedModel variables, read by OpenVINO"),
    "tflite": (tflite_parameter_count, "TFLite constant tensors, read by OpenVINO"),
    "keras": (keras_parameter_count, "Keras weights (HDF5 shapes)"),
}


def path_parameter_count(kind: str, path: str) -> tuple[int | None, str] | None:
    """(count, source) of a model file of `kind`, None for a kind read elsewhere. An
    unreadable file gives no count and says why: the run will refuse it, the advice
    goes on without it."""
    if kind not in _PATH_READERS:
        return None
    read, source = _PATH_READERS[kind]
    if not Path(path).exists():  # digits-keras before its first run trains it
        return None, f"unknown ({Path(path).name} does not exist yet)"
    try:
        return read(path), source
    except ImportError as exc:
        return None, f"unknown ({exc.name or exc} is not installed to read it)"
    except Exception as exc:
        return None, f"unknown (cannot read {Path(path).name}: {' '.join(str(exc).split())})"
