"""No traceback on any file a user hands bakeoff: a store that is not one, a workload
that is not UTF-8 TOML, data arrays cut short, a model file that is not there, an
export's manifest with a key missing, an output path that cannot be written. Each is
refused with exit 2 and one `error:` line that names the file and says what to do,
before any work starts, and a file that is not bakeoff's is left as it was.

The command runs in this process (`front_door.call`); where a command would start
working (the run's lock, the server's socket) it stops instead (`front_door.Reached`).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import bakeoff.serve
from bakeoff import lifecycle
from bakeoff.store import Store
from front_door import call, files_under, reached, refused_in_one_line, write_export

WORKLOAD = (
    'name = "fake"\n[model]\nkind = "fake"\noptions = { latency_ms = 1.0 }\n'
    '[data]\npath = "d.npz"\n'
)
RECIPE = (
    'name = "t"\n[model]\nkind = "torch"\nfactory = "m:build"\n'
    '[train]\ndata = "t.npz"\nlr = 0.001\nsteps = 10\ntarget = { value = 0.9 }\n'
)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a valid fake workload (w.toml, d.npz), the working folder; runs
    stop where they would take their lock, the server where it would listen."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(lifecycle, "hold_run_lock", reached)
    monkeypatch.setattr(bakeoff.serve, "serve", reached)
    np.savez(tmp_path / "d.npz", input=np.random.default_rng(0).random((64, 8), np.float32))
    (tmp_path / "w.toml").write_text(WORKLOAD)
    return tmp_path


def _other_app_database(path: Path) -> bytes:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    db.execute("INSERT INTO notes (text) VALUES ('mine, not bakeoff''s')")
    db.commit()
    db.close()
    return path.read_bytes()


# -- --store ---------------------------------------------------------------------------


def test_a_file_that_is_not_sqlite_is_not_a_store(folder: Path) -> None:
    (folder / "notes.db").write_text("a text file, not a database\n" * 10)
    refused_in_one_line(call("ls", "--store", "notes.db"), "notes.db", "not an SQLite database")


def test_a_folder_is_not_a_store(folder: Path) -> None:
    (folder / "runs").mkdir()
    refused_in_one_line(call("ls", "--store", "runs"), "runs", "is a folder", "runs/bakeoff.db")


def test_a_damaged_store_is_refused(folder: Path) -> None:
    with Store(folder / "b.db") as s:
        s.start_run("r1", "w.toml", {}, {})
    damaged = (folder / "b.db").read_bytes()[:100] + b"\xff" * 4000
    (folder / "b.db").write_bytes(damaged)
    refused_in_one_line(call("ls", "--store", "b.db"), "b.db")


@pytest.mark.parametrize(
    "argv",
    [
        ["ls"],
        ["show", "r1"],
        ["report", "r1"],
        ["compare", "r1", "r2"],
        ["export", "r1", "--out", "exported"],
        ["serve", "r1"],
        ["run", "w.toml"],
        ["run", "--resume", "r1"],
        ["train", "builtin:digits-train"],
        ["train", "--resume", "r1"],
        ["sweep", "w.toml", "--cluster", "local:1"],
    ],
    ids=lambda argv: "-".join(argv[:2]),
)
def test_another_applications_database_is_refused_and_left_byte_for_byte(
    folder: Path, argv: list[str]
) -> None:
    before = _other_app_database(folder / "other-app.sqlite")
    names = files_under(folder)
    line = refused_in_one_line(
        call(*argv, "--store", "other-app.sqlite"), "other-app.sqlite", "another application's"
    )
    assert "tables: notes" in line
    assert (folder / "other-app.sqlite").read_bytes() == before
    assert files_under(folder) == names  # no journal, no WAL, no run folder beside it


def test_an_empty_file_or_a_new_path_is_a_new_store(folder: Path) -> None:
    (folder / "empty.db").touch()
    assert call("ls", "--store", "empty.db").code == 0
    assert call("run", "w.toml", "--store", "new/b.db").code is None  # reached the run


# -- workload files ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "advise", "train"])
def test_a_workload_that_is_not_utf8_is_refused(folder: Path, command: str) -> None:
    (folder / "latin1.toml").write_bytes('name = "café"\n'.encode("latin-1"))
    line = refused_in_one_line(call(command, "latin1.toml"), "latin1.toml", "not UTF-8")
    assert "save it as UTF-8" in line


@pytest.mark.parametrize("command", ["run", "advise"])
def test_a_model_file_given_alone_that_is_no_model_is_refused(folder: Path, command: str) -> None:
    """A model file alone is a workload (test_model_file); one that is not a model
    (bytes, or a truncated protobuf) is said in one line, by run and advise alike."""
    for content, said in (
        (bytes(range(256)) * 4, "not a readable ONNX model"),
        (b"\x08\x01\x12\x04onnx", "has no inputs"),  # parses: an empty graph
    ):
        (folder / "model.onnx").write_bytes(content)
        refused_in_one_line(call(command, "model.onnx"), "model.onnx", said)


def test_advise_checks_that_the_model_files_are_there_as_run_does(folder: Path) -> None:
    (folder / "gone.toml").write_text(
        WORKLOAD.replace('kind = "fake"', 'kind = "onnx"\npath = "gone.onnx"')
    )
    for command in ("advise", "run"):
        refused_in_one_line(call(command, "gone.toml"), "gone.onnx", "does not exist")
    (folder / "gone.onnx").write_bytes(b"")
    assert call("advise", "gone.toml").code == 0


# -- data files --------------------------------------------------------------------------


def _bad_arrays(folder: Path) -> dict[str, bytes]:
    np.savez(folder / "ok.npz", input=np.ones((8, 4), np.float32))
    whole = (folder / "ok.npz").read_bytes()
    np.savez(folder / "obj.npz", input=np.array([{"a": 1}] * 8, dtype=object))
    np.save(folder / "one.npy", np.ones((8, 4), np.float32))
    return {
        "truncated": whole[: len(whole) // 2],
        "empty": b"",
        "random bytes": bytes(range(256)),
        "a damaged member": whole[:60] + b"\x00" * 40 + whole[100:],
        "python objects": (folder / "obj.npz").read_bytes(),
        "one .npy array": (folder / "one.npy").read_bytes(),
    }


@pytest.mark.parametrize(
    "case",
    ["truncated", "empty", "random bytes", "a damaged member", "python objects", "one .npy array"],
)
def test_data_arrays_that_cannot_be_read_are_refused(folder: Path, case: str) -> None:
    bad = _bad_arrays(folder)[case]
    (folder / "d.npz").write_bytes(bad)  # the workload's data
    refused_in_one_line(call("run", "w.toml"), "d.npz", "data.path")
    (folder / "t.npz").write_bytes(bad)  # a training recipe's
    (folder / "t.toml").write_text(RECIPE)
    refused_in_one_line(call("train", "t.toml"), "t.npz", "train.data")
    (folder / "p.npz").write_bytes(bad)  # a jax model's params
    (folder / "jm.py").write_text("def fn(params, x):\n    return x\n")
    (folder / "j.toml").write_text(
        WORKLOAD.replace('kind = "fake"', 'kind = "jax"\nfunction = "jm:fn"\nparams = "p.npz"')
    )
    refused_in_one_line(call("run", "j.toml"), "p.npz", "model.params")


def test_a_truncated_npy_is_refused(folder: Path) -> None:
    np.save(folder / "d.npy", np.ones((8, 4), np.float32))
    (folder / "d.npy").write_bytes((folder / "d.npy").read_bytes()[:90])
    (folder / "w.toml").write_text(WORKLOAD.replace("d.npz", "d.npy"))
    refused_in_one_line(call("run", "w.toml"), "d.npy", "not a readable .npy")


@pytest.mark.parametrize(
    "arrays",
    [
        {"x_train": np.array(["a", "b"]), "y_train": np.arange(2), "x_val": np.ones((2, 1))},
        {"x_train": np.float32(1), "y_train": np.arange(2), "x_val": np.ones((2, 1))},
    ],
    ids=["strings", "0-d"],
)
def test_training_data_of_the_wrong_kind_is_refused(folder: Path, arrays: dict) -> None:
    np.savez(folder / "t.npz", **arrays, y_val=np.arange(2))
    (folder / "t.toml").write_text(RECIPE)
    refused_in_one_line(call("train", "t.toml"), "t.npz", "must be an array of numbers")


# -- an export's manifest ----------------------------------------------------------------


def _without(doc: dict, key: str) -> dict:
    return {k: v for k, v in doc.items() if k != key}


MANIFEST_CASES = {
    "no inputs": (lambda m: json.dumps(_without(m, "inputs")), "inputs is missing"),
    "no runtime": (lambda m: json.dumps(_without(m, "runtime")), "runtime is missing"),
    "not JSON": (lambda m: json.dumps(m)[:-40], "not JSON"),
    "a list": (lambda m: json.dumps([m]), "not a manifest"),
    "a shape of words": (
        lambda m: json.dumps({**m, "inputs": [{**m["inputs"][0], "shape": "1x64"}]}),
        "inputs.0.shape",
    ),
    "a batch axis past the shape": (
        lambda m: json.dumps({**m, "inputs": [{**m["inputs"][0], "batch_axis": 5}]}),
        "inputs.0.batch_axis",
    ),
    "a batch size in words": (
        lambda m: json.dumps(
            {**m, "measured_by_batch_size": [{**m["measured_by_batch_size"][0], "batch_size": "1"}]}
        ),
        "measured_by_batch_size.0.batch_size",
    ),
    "no thread count": (
        lambda m: json.dumps({**m, "load": _without(m["load"], "intra_op_num_threads")}),
        "load.intra_op_num_threads",
    ),
    "an unknown runtime": (lambda m: json.dumps({**m, "runtime": "mxnet"}), "no loader"),
    "a file it does not list": (lambda m: json.dumps({**m, "file": "other.onnx"}), "other.onnx"),
    "a wrong sha256": (
        lambda m: json.dumps({**m, "files": {"model.onnx": {"sha256": "0" * 64}}}),
        "does not match its sha256",
    ),
}


def test_a_valid_export_is_served(folder: Path) -> None:
    write_export(folder / "exp")
    assert call("serve", "exp", "--port", "0").code is None  # reached the listening socket


@pytest.mark.parametrize("case", list(MANIFEST_CASES))
def test_a_manifest_with_a_key_missing_or_wrong_is_refused(folder: Path, case: str) -> None:
    manifest = write_export(folder / "exp")
    change, words = MANIFEST_CASES[case]
    (folder / "exp" / "manifest.json").write_text(change(manifest))
    refused_in_one_line(call("serve", "exp"), "exp", words)


def test_a_manifest_that_is_not_text_or_not_there_is_refused(folder: Path) -> None:
    write_export(folder / "exp")
    (folder / "exp" / "manifest.json").write_bytes(b'{"format": 1, "workload": "caf\xe9"}')
    refused_in_one_line(call("serve", "exp"), "manifest.json", "not UTF-8")
    (folder / "exp" / "manifest.json").unlink()
    refused_in_one_line(call("serve", "exp"), "exp", "not a bakeoff export")


# -- output paths ------------------------------------------------------------------------


def _stored_run(folder: Path) -> None:
    with Store(folder / "s" / "b.db") as s:
        s.start_run("r1", "w.toml", {}, {"kind": "inference"})


OUTPUT_CASES = [
    (["run", "w.toml", "--json", "{dir}"], "--json", "is a folder"),
    (["run", "w.toml", "--json", "{file}/r.json"], "--json", "is a file, not a folder"),
    (["run", "w.toml", "--mlflow", "{file}/mlruns"], "--mlflow", "is a file, not a folder"),
    (["run", "w.toml", "--cluster", "local:1", "--cluster-tmp", "{file}"], "--cluster-tmp", "file"),
    (["train", "builtin:digits-train", "--json", "{dir}"], "--json", "is a folder"),
    (["train", "builtin:digits-train", "--tensorboard", "{file}"], "--tensorboard", "is a file"),
    (["report", "r1", "-o", "{dir}"], "--output", "is a folder"),
    (["report", "r1", "-o", "{file}/r.html"], "--output", "is a file, not a folder"),
    (["export", "r1", "--out", "{file}"], "--out", "is a file, not a folder"),
    (["sweep", "w.toml", "--cluster", "local:1", "--json", "{dir}"], "--json", "is a folder"),
]


@pytest.mark.parametrize(("argv", "flag", "words"), OUTPUT_CASES, ids=lambda x: str(x)[:30])
def test_an_output_path_that_cannot_be_written_is_refused_before_the_work(
    folder: Path, argv: list[str], flag: str, words: str
) -> None:
    _stored_run(folder)
    (folder / "a-folder").mkdir()
    (folder / "a-file").write_text("x")
    names = files_under(folder)
    args = [a.format(dir="a-folder", file="a-file") for a in argv]
    refused_in_one_line(call(*args, "--store", "s/b.db"), flag, words)
    assert files_under(folder) == names  # refused before anything was written


def test_an_output_folder_that_is_not_writable_is_refused(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(The suite may run as root, which may write anywhere: the permission is faked.)"""
    locked = folder / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p).resolve() != locked and real(p, mode))
    line = refused_in_one_line(call("run", "w.toml", "--json", "locked/r.json"), "--json")
    assert "locked is not writable" in line
