"""OpenVINO IR steps: ONNX -> IR, SavedModel -> IR and torch -> IR, each kept FP32 on
disk. NNCF's quantization of such an IR is in `transforms.nncf_quantize`."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import Layout
from bakeoff.tensors import OPENVINO_NUMPY_TYPES, sequence_output_name
from bakeoff.transforms import StepFailed, step_failed

# OpenVINO's torch frontend: "No conversion rule found for operations: mylib::op, ..."
_UNCONVERTED = re.compile(r"No conversion rule found for operations: ([^\n]+)")


def input_types(ports: Iterable[Any]) -> list[tuple[str, Any]]:
    """(name, numpy dtype) of each model input, in order."""
    return [
        (p.get_any_name(), OPENVINO_NUMPY_TYPES.get(p.get_element_type().get_type_name()))
        for p in ports
    ]


def port_names(ports: Any) -> list[str]:
    """An OpenVINO model's output names in order: the name the source format gave
    each (an ONNX graph output, a SavedModel signature key), "output_<i>" where a
    port has none."""
    names = []
    for i, port in enumerate(ports):
        try:
            names.append(port.get_any_name())
        except RuntimeError:  # a port without a tensor name
            names.append(sequence_output_name(i))
    return names


def ir_from_onnx(onnx_path: str, out_dir: Path) -> dict[str, Any]:
    """The ONNX file as IR. A user's file is converted as given, not the normalized
    copy ONNX Runtime's quantizers start from (transforms/onnx_normalize.py):
    OpenVINO's ONNX frontend takes Constant weights and initializers listed as
    inputs as constants itself, and this IR is the FP32 OpenVINO candidate."""
    import openvino as ov

    try:
        model = ov.convert_model(onnx_path)
    except Exception as exc:
        raise step_failed(
            "OpenVINO conversion of the ONNX file (openvino.convert_model)",
            exc,
            "Try the onnxruntime candidates (they run the ONNX file itself); for a torch "
            "model, openvino fp32 direct (OpenVINO's PyTorch frontend, no ONNX); or convert "
            'the model with OpenVINO\'s own tools and give the IR as [model] kind = "openvino"',
        ) from exc
    path = out_dir / "model.xml"
    # save_model compresses weights to FP16 by default; an FP32 variant must not.
    ov.save_model(model, str(path), compress_to_fp16=False)
    return {"path": str(path)}


def ir_from_savedmodel(folder: str, out_dir: Path) -> dict[str, Any]:
    """A TensorFlow SavedModel folder as IR, through OpenVINO's own TensorFlow
    frontend: no TensorFlow is imported or needed. Its inputs keep the names of the
    serving signature's arguments, the names the workload's data has."""
    import openvino as ov

    try:
        model = ov.convert_model(folder)
    except Exception as exc:
        raise step_failed(
            "OpenVINO conversion of the SavedModel (openvino.convert_model)",
            exc,
            "Try the tensorflow candidates (they load the SavedModel itself), or convert "
            'it with OpenVINO\'s own tools and give the IR as [model] kind = "openvino"',
        ) from exc
    path = out_dir / "model.xml"
    ov.save_model(model, str(path), compress_to_fp16=False)  # FP32 stays FP32
    return {"path": str(path)}


def ir_from_torch(
    source: Any, example: dict[str, np.ndarray], out_dir: Path, transformer: bool
) -> dict[str, Any]:
    """The torch module straight to IR with OpenVINO's PyTorch frontend (no ONNX).

    Each input's batch axis is dynamic (-1) so one IR serves every batch size;
    for transformer inputs the sequence axis is dynamic too, and so is every
    axis the workload declares variable. Constants keep their shape. Inputs are
    renamed to the data's array names, as the ONNX path names them.
    """
    import openvino as ov
    import torch

    from bakeoff.models import build_torch_model
    from bakeoff.transforms.onnx_export import operator_in

    module = build_torch_model(source)
    layout = Layout.of(source)
    names = list(example)
    # np.asarray keeps a 0-d constant 0-d (np.ascontiguousarray would make it 1-d).
    args = tuple(torch.from_numpy(np.asarray(example[n], order="C")) for n in names)
    variable: dict[str, list[int]] = source.variable_axes

    def dynamic(name: str, axis: int) -> bool:
        batch_axis = layout.axis(name)
        if batch_axis is None:  # a constant: the same shape in every call
            return False
        return axis == batch_axis or (transformer and axis == 1) or axis in variable.get(name, [])

    shapes = [
        ov.PartialShape([-1 if dynamic(name, axis) else dim for axis, dim in enumerate(a.shape)])
        for name, a in zip(names, args, strict=True)
    ]
    try:
        with torch.no_grad():
            model = ov.convert_model(module, example_input=args, input=shapes)
    except Exception as exc:
        text = str(exc)
        found = _UNCONVERTED.search(text)
        op = found.group(1).strip() if found else operator_in(text)
        head = "OpenVINO direct conversion failed" + (f" on operator {op}" if op else "")
        print(f"--- {type(exc).__name__} ---\n{text}", file=sys.stderr)  # whole text: build log
        raise StepFailed(f"{head}: {type(exc).__name__}: {_gist(text)}") from exc
    if len(model.inputs) != len(names):
        raise StepFailed(
            f"OpenVINO direct conversion gave {len(model.inputs)} inputs for the data's "
            f"{len(names)} arrays ({', '.join(names)})"
        )
    for port, name in zip(model.inputs, names, strict=True):
        port.get_tensor().set_names({name})
    path = out_dir / "model.xml"
    ov.save_model(model, str(path), compress_to_fp16=False)
    return {"path": str(path), "exporter": "openvino.convert_model (torch, no ONNX)"}


def _gist(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
