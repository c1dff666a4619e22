"""LiteRT and OpenVINO on a user's own .tflite file (kind "tflite"): the file as it is
is the reference, a file quantized already says so, and a batch fixed at 1 in the
file is resized where the runtime can, else refused with the batch size it cannot run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bakeoff import hardware
from bakeoff.backends import (
    Availability,
    file_reference_note,
    get_backend,
    reference_variant,
)
from bakeoff.backends import litert as litert_backend
from bakeoff.backends.tflite_file import quantized_weights
from bakeoff.batching import Layout
from bakeoff.loader import load_workload
from front_door import call
from tf_models import FLOAT_TFLITE, INT8_TFLITE, TFLITE_FEATURES


def test_a_tflite_file_is_run_as_it_is_by_litert_and_read_by_openvino() -> None:
    assert reference_variant("tflite").id == "litert-fp32"
    [fp32] = get_backend("litert").offers("fp32", "tflite")
    assert fp32.reason is None and fp32.variant.id == "litert-fp32"
    [int8] = get_backend("litert").offers("int8", "tflite")
    assert "no original model" in (int8.reason or "")
    ov = get_backend("openvino").offers("int8", "tflite")
    assert [o.variant.id for o in ov] == ["openvino-int8-nncf", "openvino-int8-nncf-aa"]
    [ort] = get_backend("onnxruntime").offers("fp32", "tflite")
    assert "TFLite-to-ONNX" in (ort.reason or "") or "tf2onnx is installed" in (ort.reason or "")


def test_litert_needs_tensorflow_only_to_convert_a_keras_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without TensorFlow, LiteRT is available and runs a .tflite file; converting a
    Keras model is what it cannot do, said in that offer."""

    def installed(dist: str, module: str, install: str) -> Availability:
        if module == "tensorflow":
            return Availability(False, None, f"{dist} is not installed", install)
        return Availability(True, "1.0")

    monkeypatch.setattr(litert_backend, "package_availability", installed)
    assert litert_backend.availability().available
    assert litert_backend.offers("fp32", "tflite")[0].reason is None
    [keras] = litert_backend.offers("fp32", "keras")
    assert "needed to convert to LiteRT" in (keras.reason or "")


class _Unresizable:
    """An interpreter whose graph refuses any batch but 1 (as LiteRT does for a
    Reshape to a constant shape), or takes it and keeps its output at 1."""

    def __init__(self, refuses: bool) -> None:
        self.refuses = refuses

    def get_input_details(self) -> list[dict[str, Any]]:
        shape = np.array([1, TFLITE_FEATURES])
        return [{"name": "serving_default_x:0", "index": 0, "shape": shape,
                 "shape_signature": shape}]  # fmt: skip

    def get_output_details(self) -> list[dict[str, Any]]:
        return [{"name": "StatefulPartitionedCall:0", "shape": np.array([1, 4])}]

    def resize_tensor_input(self, index: int, shape: list[int]) -> None:
        if self.refuses and shape[0] != 1:
            raise ValueError("Cannot set tensor: Dimension mismatch")

    def allocate_tensors(self) -> None:
        pass


@pytest.mark.parametrize("refuses", [True, False])
def test_a_batch_litert_cannot_resize_fails_the_load_with_the_batch_size(refuses: bool) -> None:
    layout = Layout({}, ())
    with pytest.raises(RuntimeError) as raised:
        litert_backend.allocate_fixed(_Unresizable(refuses), layout, ["serving_default_x:0"], 4)
    assert "fixes the batch at 1" in str(raised.value)
    assert "batch size 4" in str(raised.value)
    litert_backend.allocate_fixed(_Unresizable(refuses), layout, ["serving_default_x:0"], 1)


def test_the_files_weights_are_read_without_tensorflow(tf_models: Path) -> None:
    assert quantized_weights(str(tf_models / FLOAT_TFLITE)) is None
    assert quantized_weights(str(tf_models / INT8_TFLITE)) == "int8"
    assert file_reference_note("tflite", str(tf_models / FLOAT_TFLITE)) == ""
    note = file_reference_note("tflite", str(tf_models / INT8_TFLITE))
    assert note.startswith("the file's weights are already int8")
    assert "litert-fp32 names it" in note


def test_a_tflite_file_alone_is_a_workload_of_every_sample(tf_models: Path) -> None:
    """Its batch is fixed at 1 in the file, yet the generated inputs hold 128 samples."""
    with pytest.warns(UserWarning, match="already int8"):
        workload = load_workload(str(tf_models / INT8_TFLITE))
    assert workload.source.kind == "tflite"
    [(name, array)] = workload.inputs.items()
    assert name == "serving_default_x:0" and array.shape == (128, TFLITE_FEATURES)
    assert any(n.startswith("the file's weights are already int8") for n in workload.notes)


def _run(path: Path, tmp_path: Path) -> dict[str, dict[str, Any]]:
    doc_path = tmp_path / "r.json"
    flags = ("--quick", "--batch-sizes", "1,4", "--budget", "3")
    grid = ("--runtimes", "litert,openvino", "--precisions", "fp32,int8")
    store = ("--store", str(tmp_path / "s.db"), "--json", str(doc_path))
    done = call("run", str(path), *flags, *grid, *store)
    assert done.code == 0, done.stderr
    doc = json.loads(doc_path.read_text())
    by_id = {c["id"]: c for c in doc["candidates"]}
    by_id["notes"] = {"notes": doc["workload"].get("notes", [])}
    by_id["left_out"] = dict(doc["settings"]["left_out"])
    return by_id


def test_a_float_tflite_runs_on_litert_and_openvino_at_batch_1_and_4(
    tf_models: Path, tmp_path: Path
) -> None:
    by_id = _run(tf_models / FLOAT_TFLITE, tmp_path)
    for batch in (1, 4):  # the file's batch of 1 resized by both runtimes
        for runtime in ("litert", "openvino"):
            cand = by_id[f"{runtime}-fp32-b{batch}"]
            assert cand["status"] == "ok", cand["reason"]
        assert by_id[f"openvino-fp32-b{batch}"]["quality"]["drop"] < 1e-4
        assert by_id[f"litert-int8-b{batch}"]["status"] == "unavailable"
    assert by_id["openvino-fp32-b1"]["exporter"] == "openvino.convert_model (TFLite)"
    # NNCF quantized the float file: gated against the file on LiteRT, pass or not
    nncf = by_id["openvino-int8-nncf-b1"]
    assert nncf["status"] in ("ok", "rejected") and nncf["quality"]["drop"] is not None
    assert not any("already" in n for n in by_id["notes"]["notes"])


def test_an_int8_tflite_is_its_own_reference_and_gates_openvino(
    tf_models: Path, tmp_path: Path
) -> None:
    by_id = _run(tf_models / INT8_TFLITE, tmp_path)
    [note] = [n for n in by_id["notes"]["notes"] if "already int8" in n]
    assert "the reference is the file as it is, on LiteRT" in note
    for batch in (1, 4):
        reference = by_id[f"litert-fp32-b{batch}"]
        assert reference["status"] == "ok", reference["reason"]
        quantization = reference["settings"]["quantization"]
        assert quantization == {"weights": "int8, quantized in the file"}
        ov = by_id[f"openvino-fp32-b{batch}"]
        assert ov["quality"]["drop"] is not None  # gated against the file on LiteRT
        if hardware.int8_path() in ("amx", "vnni"):
            assert ov["status"] == "ok", ov["reason"]
        else:
            # Without VNNI, OpenVINO's INT8 kernels round otherwise than LiteRT's
            # (an AVX2 EPYC: cosine 0.976): gated, with the figure either way.
            assert ov["status"] in ("ok", "rejected"), ov["reason"]
            assert ov["status"] == "ok" or "quality gate" in ov["reason"]
    # no NNCF on weights that are int8 already
    assert "already int8" in by_id["left_out"]["openvino-int8-nncf"]
