"""The quantization of a .tflite file's inputs and outputs. A fully integer file
(for microcontrollers, NPUs, the Edge TPU) takes and gives int8 or uint8 tensors,
each with a scale and zero point: real = (q - zero_point) * scale. bakeoff's data
is real-valued, so it is quantized with the file's own parameters before any
runtime sees it, and the quality gate compares outputs dequantized: raw integers
with a zero point of, say, 77 would make cosine similarity near 1 whatever the
model computed.

LiteRT's interpreter lists the parameters; where only OpenVINO is installed, its
TFLite frontend writes them as the FakeQuantize right after each integer input and
right before each integer output, whose integer and real ranges give them back.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Quantized:
    """One integer tensor's affine quantization."""

    dtype: str  # "int8", "uint8", "int16"
    scale: float
    zero_point: int

    def quantize(self, real: np.ndarray) -> np.ndarray:
        info = np.iinfo(self.dtype)
        q = np.round(np.asarray(real, dtype=np.float64) / self.scale) + self.zero_point
        return np.clip(q, info.min, info.max).astype(self.dtype)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return ((np.asarray(q, dtype=np.float32) - self.zero_point) * self.scale).astype(np.float32)

    def describe(self) -> str:
        return f"{self.dtype}, scale {self.scale:.6g}, zero point {self.zero_point}"


# Per input and per output in the file's order: None where the tensor is real-valued
# (or an integer without a scale: an index, a token id).
Io = tuple[tuple[Quantized | None, ...], tuple[Quantized | None, ...]]

_INTEGER = ("int8", "uint8", "int16")


@functools.cache
def io_quantization(path: str) -> Io:
    """The file's input and output quantization; nothing quantized where neither LiteRT
    nor OpenVINO reads the file (the candidates' own loads say what is wrong)."""
    try:
        return _from_litert(path)
    except Exception:  # not installed, or it refuses the file: OpenVINO may read it
        pass
    try:
        return _from_openvino(path)
    except Exception:
        return (), ()


@functools.cache
def input_names(path: str) -> tuple[str, ...]:
    """The file's input names in order, as OpenVINO's reader gives them (LiteRT's are
    the same tensors' names)."""
    import openvino as ov

    return tuple(port.get_any_name() for port in ov.Core().read_model(path).inputs)


def quantize_inputs(arrays: dict[str, np.ndarray], path: str) -> tuple[dict[str, np.ndarray], str]:
    """The data with every real-valued array the file takes as an integer input
    quantized by the file's own parameters, and the note that says what was done
    ("" for a file with no quantized input or output). Arrays are matched to the
    file's inputs by name (LiteRT's "serving_default_<name>:0") where all match, else
    by position; an integer array is taken as quantized already."""
    inputs, outputs = io_quantization(path)
    found, said = dict(arrays), []
    if any(q is not None for q in inputs):
        names = [plain_input_name(n) for n in input_names(path)]
        order = names if set(names) == set(arrays) else list(arrays)
        for name, q in zip(order, inputs, strict=False):
            if q is not None and np.issubdtype(found[name].dtype, np.floating):
                found[name] = q.quantize(found[name])
                said.append(f"{name}: {q.describe()}")
    parts = []
    if said:
        parts.append(
            f"the file takes quantized inputs ({'; '.join(said)}): bakeoff quantizes the "
            "real-valued data with the file's own scales and zero points"
        )
    elif any(q is not None for q in inputs):
        parts.append("the file takes quantized inputs, and the data gives integers already")
    if n := sum(q is not None for q in outputs):
        whose = "its" if parts else "the file's"
        parts.append(
            f"{whose} {n} quantized output(s) are compared dequantized, as the real values "
            "they stand for"
        )
    return found, "; ".join(parts)


def plain_input_name(name: str) -> str:
    """An input's name as the model's author gave it: the TFLite converter writes
    "serving_default_<name>:0"."""
    return name.removeprefix("serving_default_").rsplit(":", 1)[0]


def _from_litert(path: str) -> Io:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_path=path,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )

    return (
        tuple(map(of_detail, interpreter.get_input_details())),
        tuple(map(of_detail, interpreter.get_output_details())),
    )


def of_detail(detail: dict) -> Quantized | None:
    """A LiteRT tensor detail's quantization, where it is an integer tensor with one."""
    dtype = np.dtype(detail["dtype"]).name
    scale, zero_point = detail.get("quantization") or (0.0, 0)
    if dtype not in _INTEGER or not scale:
        return None
    return Quantized(dtype, float(scale), int(zero_point))


def dequantized(array: object, quantized: Quantized | None) -> np.ndarray:
    """An output as real values: dequantized where the file quantized it."""
    if quantized is None:
        return np.asarray(array, dtype=np.float32)
    return quantized.dequantize(np.asarray(array))


def _from_openvino(path: str) -> Io:
    import openvino as ov

    model = ov.Core().read_model(path)
    inputs = tuple(_input_quantization(p.get_node()) for p in model.inputs)
    outputs = tuple(_output_quantization(r) for r in model.get_results())
    return inputs, outputs


def _constant(node: object, index: int) -> float:
    source = node.input_value(index).get_node()  # type: ignore[attr-defined]
    return float(np.asarray(source.get_data()).ravel()[0])


def _ranges(fq: object) -> tuple[float, float, float, float]:
    """A FakeQuantize's input low/high and output low/high (per tensor)."""
    return tuple(_constant(fq, i) for i in (1, 2, 3, 4))  # type: ignore[return-value]


def _type_name(port: object) -> str:
    return np.dtype(port.get_element_type().to_dtype()).name  # type: ignore[attr-defined]


def _input_quantization(parameter: object) -> Quantized | None:
    """Parameter(int) -> Convert -> FakeQuantize(integer range -> real range)."""
    dtype = _type_name(parameter.output(0))  # type: ignore[attr-defined]
    if dtype not in _INTEGER:
        return None
    for convert in parameter.output(0).get_target_inputs():  # type: ignore[attr-defined]
        node = convert.get_node()
        if node.get_type_name() != "Convert":
            continue
        for target in node.output(0).get_target_inputs():
            fq = target.get_node()
            if fq.get_type_name() == "FakeQuantize":
                in_low, in_high, out_low, out_high = _ranges(fq)
                scale = (out_high - out_low) / (in_high - in_low)
                return Quantized(dtype, scale, round(in_low - out_low / scale))
    return None


def _output_quantization(result: object) -> Quantized | None:
    """FakeQuantize(real range -> integer range) -> Convert(int) -> Result."""
    convert = result.input_value(0).get_node()  # type: ignore[attr-defined]
    if convert.get_type_name() != "Convert":
        return None
    dtype = _type_name(convert.output(0))
    fq = convert.input_value(0).get_node()
    if dtype not in _INTEGER or fq.get_type_name() != "FakeQuantize":
        return None
    in_low, in_high, out_low, out_high = _ranges(fq)
    scale = (in_high - in_low) / (out_high - out_low)
    return Quantized(dtype, scale, round(out_low - in_low / scale))
