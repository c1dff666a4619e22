"""Feeding a graph its inputs and naming what it returns: element types to numpy
dtypes, data arrays matched to a graph's inputs, a model's outputs as named
arrays. No runtime is imported here: backends, transforms and the export loader
all use it, so it sits below all of them."""

from __future__ import annotations

from typing import Any

import numpy as np

# ONNX Runtime's input type names -> numpy dtypes.
ONNX_NUMPY_TYPES: dict[str, Any] = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
}

# OpenVINO element type names -> numpy dtypes.
OPENVINO_NUMPY_TYPES: dict[str, Any] = {
    "f32": np.float32,
    "f64": np.float64,
    "f16": np.float16,
    "i64": np.int64,
    "i32": np.int32,
    "i8": np.int8,
    "u8": np.uint8,
    "boolean": np.bool_,
}


def map_inputs(
    batch: dict[str, np.ndarray], model_inputs: list[tuple[str, Any]]
) -> dict[str, np.ndarray]:
    """Match data arrays to a graph's inputs by name, else by position; cast dtypes."""
    names = [name for name, _ in model_inputs]
    if set(names) <= set(batch):
        arrays = [batch[n] for n in names]
    elif len(batch) == len(names):
        arrays = list(batch.values())
    else:
        raise ValueError(f"model inputs {names} do not match data arrays {list(batch)}")
    return {
        # np.asarray, not np.ascontiguousarray: that makes a 0-d constant 1-d.
        name: np.asarray(arr, dtype=dtype, order="C") if dtype is not None else arr
        for (name, dtype), arr in zip(model_inputs, arrays, strict=True)
    }


# The name of a model's only output, and of the first of several in a sequence:
# "output", as the ONNX export names it, so one name holds across formats.
FIRST_OUTPUT = "output"


def sequence_output_name(index: int, prefix: str = "") -> str:
    """The name of a sequence's `index`th output: "output", "output_1", ... at the top."""
    if prefix:
        return f"{prefix}_{index}"
    return FIRST_OUTPUT if index == 0 else f"{FIRST_OUTPUT}_{index}"


def named_outputs(out: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """A model's return value as (name, tensor) pairs in its own order, for the quality
    gate: a dict's (or a transformers ModelOutput's) keys, a sequence's positions
    ("output", "output_1", ...), nested ones joined with "."; a None is no output.
    The tensors stay the framework's own: the caller converts them."""
    if out is None:
        return []
    if hasattr(out, "keys") and hasattr(out, "__getitem__"):  # dict, ModelOutput
        found: list[tuple[str, Any]] = []
        for key in out.keys():  # noqa: SIM118 (a ModelOutput iterates its keys this way)
            found += named_outputs(out[key], f"{prefix}.{key}" if prefix else str(key))
        return found
    if isinstance(out, (tuple, list)):
        found = []
        for i, item in enumerate(out):
            found += named_outputs(item, sequence_output_name(i, prefix))
        return found
    return [(prefix or FIRST_OUTPUT, out)]
