"""A TFLite file as OpenVINO IR: OpenVINO reads a .tflite itself, with no TensorFlow
(as it reads a SavedModel: `openvino_convert.ir_from_savedmodel`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bakeoff.transforms import step_failed


def ir_from_tflite(path: str, out_dir: Path) -> dict[str, Any]:
    """A .tflite file as IR, through OpenVINO's own TFLite frontend (no TensorFlow).
    Its batch axis (axis 0 of every input), often fixed at 1 in the file, is made
    dynamic where the graph's shapes allow, so one IR runs every batch size; where
    they do not, the IR keeps the file's batch and says it (`fixed_batch`)."""
    import openvino as ov

    try:
        model = ov.convert_model(path)
    except Exception as exc:
        raise step_failed(
            "OpenVINO conversion of the TFLite file (openvino.convert_model)",
            exc,
            "Try the litert candidates (they run the .tflite file itself)",
        ) from exc
    out: dict[str, Any] = {}
    try:
        model.reshape({port: _dynamic_batch(port.get_partial_shape()) for port in model.inputs})
    except Exception as exc:
        print(f"--- model.reshape to a dynamic batch: {type(exc).__name__} ---", file=sys.stderr)
        print(exc, file=sys.stderr)  # the build log says why the batch stays fixed
        model = ov.convert_model(path)  # as the file fixes it: a failed reshape may leave it
        first = model.inputs[0].get_partial_shape()
        if first.rank.is_static and first.rank.get_length() and first[0].is_static:
            out["fixed_batch"] = first[0].get_length()
    renamed = _signature_names(model, path)
    if renamed:
        out["outputs_renamed"] = renamed
    path_xml = out_dir / "model.xml"
    ov.save_model(model, str(path_xml), compress_to_fp16=False)  # FP32 stays FP32
    return {"path": str(path_xml), **out}


def _signature_names(model: Any, path: str) -> dict[str, str]:
    """The IR's outputs renamed from the converter's tensor names
    ("StatefulPartitionedCall:0") to the file's serving signature names ("onset"),
    as LiteRT names them (backends.litert.output_tensors), so the quality gate
    matches them by name; read with LiteRT where it is installed, else left as is.
    Returns {old: new}."""
    try:
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=path)
        signature = interpreter._get_full_signature_list().get("serving_default", {})
        by_index = {index: name for name, index in signature.get("outputs", {}).items()}
        wanted = {
            d["name"]: by_index[d["index"]]
            for d in interpreter.get_output_details()
            if d["index"] in by_index
        }
    except Exception:  # no LiteRT, or no signature: the tensor names stay
        return {}
    renamed = {}
    for port in model.outputs:
        old = next((n for n in port.get_names() if n in wanted), None)
        if old is not None:
            port.get_tensor().set_names({wanted[old]})
            renamed[old] = wanted[old]
    return renamed


def _dynamic_batch(shape: Any) -> Any:
    """`shape` with axis 0 dynamic (a scalar input keeps its shape)."""
    import openvino as ov

    if shape.rank.is_dynamic or shape.rank.get_length() == 0:
        return shape
    return ov.PartialShape([ov.Dimension(), *list(shape)[1:]])
