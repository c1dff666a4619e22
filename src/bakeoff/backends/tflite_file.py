"""What a user's .tflite file holds that changes how it is run: whether its weights
are quantized already (then there is no FP32 model to compare with, and the file
itself is the reference), read without TensorFlow and without running anything.

LiteRT's interpreter lists the file's tensors with their types and quantization
parameters (its import takes milliseconds); where only OpenVINO is installed, its
TFLite frontend's constants say the same through their element types.
"""

from __future__ import annotations

import functools

# Integer tensors that carry quantization scales are quantized weights or
# activations; an integer tensor without scales is an index or a shape.
_QUANTIZED_TYPES = ("int4", "int8", "uint8", "int16")
_OPENVINO_QUANTIZED = {"i4": "int4", "i8": "int8", "u8": "uint8", "i16": "int16"}


@functools.cache
def quantized_weights(path: str) -> str | None:
    """The quantized type of the file's weights ("int8", ...), or None for a float
    file. A file neither LiteRT nor OpenVINO can read is taken as float here: the
    workload checks and the candidates' own loads say what is wrong with it."""
    try:
        return _litert_quantized(path)
    except ImportError:
        pass
    except Exception:  # LiteRT refuses the file: let OpenVINO try, as the candidates will
        pass
    try:
        return _openvino_quantized(path)
    except Exception:  # not installed, or not a file it reads
        return None


def _litert_quantized(path: str) -> str | None:
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    # No delegate: nothing is prepared to run, the tensors are only listed.
    interpreter = Interpreter(
        model_path=path,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    found: list[str] = []
    for detail in interpreter.get_tensor_details():
        name = np.dtype(detail["dtype"]).name
        scales = detail.get("quantization_parameters", {}).get("scales")
        if name in _QUANTIZED_TYPES and scales is not None and len(scales) > 0:
            found.append(name)
    return max(set(found), key=found.count) if found else None


def _openvino_quantized(path: str) -> str | None:
    import openvino as ov

    found = [
        _OPENVINO_QUANTIZED[t]
        for op in ov.Core().read_model(path).get_ops()
        if op.get_type_name() == "Constant"
        and (t := op.get_element_type().get_type_name()) in _OPENVINO_QUANTIZED
    ]
    return max(set(found), key=found.count) if found else None


def quantized_note(path: str, runtime: str, reference_id: str) -> str:
    """The run note for a file whose weights are quantized already ("" for a float
    file): the comparison is with the file, not with an FP32 model."""
    quantized = quantized_weights(path)
    if quantized is None:
        return ""
    return (
        f"the file's weights are already {quantized}: the reference is the file as it is, "
        f"on {runtime} ({reference_id} names it, though its weights are {quantized}), and "
        "the other candidates are gated against it; no FP32 model exists to compare with, "
        "and the fp32 candidates of this file run its quantized weights as they are"
    )
