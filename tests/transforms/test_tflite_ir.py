"""A TFLite file's outputs keep their signature names through OpenVINO's conversion,
as LiteRT gives them, so the quality gate pairs them by name."""

from __future__ import annotations

from pathlib import Path


def test_outputs_are_named_as_the_files_signature_names_them(
    tf_models: Path, tmp_path: Path
) -> None:
    import openvino as ov
    from ai_edge_litert.interpreter import Interpreter

    from bakeoff.backends.litert import output_tensors
    from bakeoff.transforms.tflite_ir import ir_from_tflite
    from tf_models import HEADS_TFLITE

    path = str(tf_models / HEADS_TFLITE)
    built = ir_from_tflite(path, tmp_path)
    model = ov.Core().read_model(built["path"])
    names = [sorted(port.get_names()) for port in model.outputs]
    litert = [name for name, _ in output_tensors(Interpreter(model_path=path))]
    # the converter's tensor names ("StatefulPartitionedCall:0") went
    assert sorted(n for (n,) in names) == sorted(litert) == ["contour", "note", "onset"]
    assert set(built["outputs_renamed"].values()) == {"contour", "note", "onset"}
