"""A Keras model whose ONNX export fails still gets OpenVINO candidates: OpenVINO
converts its SavedModel, written on the TensorFlow backend in a child process."""

from __future__ import annotations

from pathlib import Path

import pytest

from front_door import breaks_on_import

# Both of torch's ONNX exporters refuse the model, as they refuse fer 25.10.3's
# emotion CNN (a Cast the TorchScript exporter cannot write, torch.export failing).
ONNX_EXPORT_REFUSES = breaks_on_import(
    "torch.onnx", "export", 'RuntimeError("SymbolicValueError: Failed to export a node")'
)


# make test runs Keras' ONNX path (end_to_end/test_keras_litert.py); this fallback
# takes two exports and a TensorFlow child process (~50 s).
@pytest.mark.slow
def test_a_keras_model_torch_cannot_export_to_onnx_reaches_openvino_as_a_savedmodel(
    tf_models: Path, tmp_path: Path
) -> None:
    from front_door import run_in_child
    from tf_models import H5_FILE

    flags = ("--quick", "--runtimes", "keras-tensorflow,openvino", "--precisions", "fp32")
    flags += ("--batch-sizes", "2", "--budget", "2", "--store", str(tmp_path / "s.db"))
    doc = run_in_child(tmp_path, ONNX_EXPORT_REFUSES, str(tf_models / H5_FILE), *flags)
    by_id = {c["id"]: c for c in doc["candidates"]}
    ov = by_id["openvino-fp32-b2"]
    assert ov["status"] == "ok", ov
    assert ov["exporter"] == "keras tf_saved_model -> openvino.convert_model"
    assert ov["quality"]["drop"] < 1e-4
