"""The FP32 reference's outputs when the model crashes at one batch size: the
held-out set runs again in smaller chunks, each in a fresh process, and only the
candidates at the batch size that crashes fail. On the fake runtime, whose
`crash_at_batch` kills its worker with SIGSEGV on a call of that many samples
(the real runtimes' case is in tests/end_to_end/test_real_runtimes.py). And a
reference whose runtime cannot load the model at all: another runtime's FP32 of the
same file stands in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bakeoff import api, environment
from bakeoff.errors import BakeoffError
from bakeoff.inference.reference import smaller_chunks
from front_door import breaks_on_import


@pytest.mark.parametrize(
    ("failed_at", "sizes", "tried"),
    [
        (32, [1, 32], [1]),
        (32, [1, 8, 32], [8, 1]),
        (32, [8, 32], [8, 1]),  # 1 last, though the run does not measure it
        (8, [1, 8, 32], [1]),  # only smaller ones
        (1, [1, 32], []),  # nothing below 1: the run gives up
    ],
)
def test_the_chunks_tried_after_a_failure_are_the_runs_smaller_batch_sizes_then_1(
    failed_at: int, sizes: list[int], tried: list[int]
) -> None:
    assert smaller_chunks(failed_at, sizes) == tried


def _run(
    folder: Path, crash_at: int, batch_sizes: list[int], fault: str = "crash_at_batch", **opts: Any
) -> api.RunResult:
    """fp32 (the reference) crashes (or hangs) at `crash_at`; int8 runs everywhere."""
    np.savez(folder / "d.npz", input=np.random.default_rng(0).random((64, 8), dtype=np.float32))
    (folder / "w.toml").write_text(
        'name = "fake"\n[model]\nkind = "fake"\n'
        f"options = {{ {fault} = {{ fp32 = {crash_at} }} }}\n"
        '[data]\npath = "d.npz"\n[search]\nruntimes = ["fake"]\n'
        f'precisions = ["fp32", "int8"]\nbatch_sizes = {batch_sizes}\n'
    )
    options = api.RunOptions(quick=True, store=folder / "s.db", **opts)
    return api.run(str(folder / "w.toml"), options)


@pytest.fixture(params=[1, 2], ids=["one core", "two cores"])
def cores(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The reference's outputs come from a reference process of its own (one core),
    or from its own candidate's worker loaded beside the builds (two)."""
    monkeypatch.setattr(environment, "physical_cores", lambda: request.param)
    return int(request.param)


def test_a_crash_at_the_largest_batch_size_falls_back_to_the_next_smaller(
    tmp_path: Path, cores: int
) -> None:
    result = _run(tmp_path, 32, [1, 8, 32])
    assert result.exit_code == 0
    doc: dict[str, Any] = result.document
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["fake-fp32-b32"]["status"] == "failed"
    assert "SIGSEGV" in by_id["fake-fp32-b32"]["reason"]
    for cid in ("fake-fp32-b1", "fake-fp32-b8", "fake-int8-b1", "fake-int8-b8", "fake-int8-b32"):
        assert by_id[cid]["status"] == "ok", (cid, by_id[cid]["reason"])
        assert by_id[cid]["quality"]["value"] == pytest.approx(1.0)
    outputs = doc["workload"]["reference_outputs"]
    if cores == 1:
        # Its own process runs the held-out set at the run's first batch size: 1,
        # where nothing crashes.
        assert outputs == {"worker": "reference", "chunk_size": 1, "fell_back_from": []}
    else:
        # The reference's candidate's worker, shared with 8 and 32, ran it in chunks
        # of 32 and died; then chunks of 8, the next batch size down, in a process
        # of its own.
        assert outputs["worker"] == "reference" and outputs["chunk_size"] == 8
        (failed,) = outputs["fell_back_from"]
        assert failed["chunk_size"] == 32 and "SIGSEGV" in failed["reason"]
    # The worker shared by 1, 8 and 32 died in its quality pass at 32 (beside the
    # builds, or when batch 1 was measured): batch 1 got a worker of its own.
    assert "SIGSEGV" in by_id["fake-fp32-b1"]["worker"]["alone_because"]
    assert [v["winner"] is not None for v in doc["verdicts"]] == [True, True, True]


def test_the_run_gives_up_only_when_the_reference_crashes_in_chunks_of_1_too(
    tmp_path: Path, cores: int
) -> None:
    """At batch 1 every chunk size down to 1 was tried: the error names each."""
    expected = r"in chunks of 8: .*SIGSEGV.*; in chunks of 1: .*SIGSEGV" if cores > 1 else "SIGSEGV"
    with pytest.raises(BakeoffError, match=r"FP32 reference \(fake-fp32, .*" + expected):
        _run(tmp_path, 1, [1, 8])


def test_a_hang_at_the_largest_batch_size_is_killed_and_fails_only_its_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference's worker, shared by 1 and 32, hangs in its quality pass at 32: it
    is killed at the trial timeout, the held-out set runs again in chunks of 1, and
    only fp32 at 32 (whose own worker hangs too) fails. On the fake runtime, whose
    worker loads in a fraction of a second, a short timeout is safe on a busy
    machine; the real runtimes' hang is `slow` (tests/end_to_end/test_real_runtimes.py)."""
    monkeypatch.setattr(environment, "physical_cores", lambda: 2)
    result = _run(tmp_path, 32, [1, 32], fault="hang_at_batch", trial_timeout_s=8)
    assert result.exit_code == 0
    doc: dict[str, Any] = result.document
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["fake-fp32-b32"]["status"] == "failed"
    assert "trial timeout of 8 s" in by_id["fake-fp32-b32"]["reason"]
    for cid in ("fake-fp32-b1", "fake-int8-b1", "fake-int8-b32"):
        assert by_id[cid]["status"] == "ok", (cid, by_id[cid]["reason"])
    outputs = doc["workload"]["reference_outputs"]
    assert outputs["chunk_size"] == 1
    (failed,) = outputs["fell_back_from"]
    assert failed["chunk_size"] == 32 and "trial timeout of 8 s" in failed["reason"]


# Put first on a child's PYTHONPATH (its workers inherit it): TensorFlow imports, but
# cannot load the SavedModel, as an older TensorFlow's SavedModel fails on a newer one
# (`'_UserObject' object has no attribute 'add_slot'`, seen on a real model).
TENSORFLOW_CANNOT_LOAD = breaks_on_import(
    "tensorflow",
    "saved_model.load",
    """AttributeError("'_UserObject' object has no attribute 'add_slot'")""",
)


def test_a_savedmodel_its_tensorflow_cannot_load_gets_openvino_as_its_reference(
    tf_models: Path, tmp_path: Path
) -> None:
    """The reference's own runtime fails to load the model: the builds go on, and
    OpenVINO's FP32 of the same folder gives the reference's outputs; the run says so,
    and TensorFlow's candidates fail with TensorFlow's own reason."""
    from front_door import run_in_child
    from tf_models import SAVEDMODEL

    flags = ("--quick", "--precisions", "fp32", "--batch-sizes", "1", "--budget", "3")
    store = ("--store", str(tmp_path / "s.db"))
    doc = run_in_child(
        tmp_path, TENSORFLOW_CANNOT_LOAD, str(tf_models / SAVEDMODEL), *flags, *store
    )
    assert doc["workload"]["reference"] == "openvino-fp32"
    why = doc["workload"]["reference_outputs"]["stands_in_for"]
    assert "tensorflow-fp32" in why and "add_slot" in why
    assert any("the reference is openvino-fp32, standing in" in n for n in doc["workload"]["notes"])
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["openvino-fp32-b1"]["status"] == "ok"
    assert by_id["tensorflow-fp32-b1"]["status"] == "failed"
    assert "add_slot" in by_id["tensorflow-fp32-b1"]["reason"]


def test_an_onnx_file_onnx_runtime_refuses_gets_openvino_as_its_reference(
    tmp_path: Path,
) -> None:
    """ONNX Runtime refuses the file (as it refuses an operator it lacks): OpenVINO's
    FP32 of the same file gives the reference's outputs, and the run says why."""
    from front_door import run_in_child
    from tiny_mlp import mlp_onnx

    model = mlp_onnx(tmp_path / "model.onnx", (16, 32, 5), "features")
    refuses = breaks_on_import(
        "onnxruntime",
        "InferenceSession",
        'RuntimeError("NOT_IMPLEMENTED : Could not find an implementation for Wobble(1)")',
    )
    flags = ("--quick", "--runtimes", "onnxruntime,openvino", "--precisions", "fp32")
    flags += ("--batch-sizes", "2", "--budget", "2", "--store", str(tmp_path / "s.db"))
    doc = run_in_child(tmp_path, refuses, str(model), *flags)
    assert doc["workload"]["reference"] == "openvino-fp32"
    assert "Wobble" in doc["workload"]["reference_outputs"]["stands_in_for"]
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["openvino-fp32-b2"]["status"] == "ok"
    assert by_id["onnxruntime-fp32-b2"]["status"] == "failed"
    assert "Wobble" in by_id["onnxruntime-fp32-b2"]["reason"]
