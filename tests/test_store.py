"""The SQLite store: runs, candidates, raw trial samples, durability."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bakeoff import store as store_mod
from bakeoff.errors import UserError
from bakeoff.store import Store

ENV = {"python": "3.11", "cpu": {"model": "test"}}
SETTINGS = {"quick": True, "threads": 2}


@pytest.fixture
def store(store_path: Path) -> Iterator[Store]:
    s = Store(store_path)
    yield s
    s.close()


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Store timestamps come from a clock the test advances, so ordering is certain."""
    now = [1_000.0]

    def tick() -> float:
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(store_mod, "time", SimpleNamespace(time=tick))
    return now


def _doc(cid: str, status: str = "ok", **extra: object) -> dict:
    return {"id": cid, "status": status, "reason": "", **extra}


def test_store_creates_parent_folders(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "bakeoff.db"
    s = Store(path)
    s.close()
    assert path.is_file()


def test_start_run_and_read_back(store: Store) -> None:
    store.start_run("20260101-000000-aaaa", "w.toml", ENV, SETTINGS)
    rec = store.run("20260101-000000-aaaa")
    assert rec["run_id"] == "20260101-000000-aaaa"
    assert rec["workload"] == "w.toml"
    assert rec["status"] == "running"
    assert rec["environment"] == ENV
    assert rec["settings"] == SETTINGS
    assert rec["document"] is None
    assert rec["candidates"] == []


def test_put_candidate_replaces_on_second_put(store: Store) -> None:
    store.start_run("r1", "w.toml", ENV, SETTINGS)
    store.put_candidate("r1", _doc("fake-fp32-b1", "pending"))
    store.put_candidate("r1", _doc("fake-int8-b1", "pending"))
    store.put_candidate("r1", _doc("fake-fp32-b1", "ok", latency_ms={"p50": 1.5}))
    cands = store.run("r1")["candidates"]
    assert [c["id"] for c in cands] == ["fake-fp32-b1", "fake-int8-b1"]
    assert cands[0]["status"] == "ok"
    assert cands[0]["latency_ms"] == {"p50": 1.5}
    assert cands[1]["status"] == "pending"
    rows = store.db.execute("SELECT COUNT(*) FROM candidates WHERE run_id = 'r1'").fetchone()
    assert rows[0] == 2
    assert store.runs()[0]["candidates"] == 2


def test_trial_samples_round_trip_exactly(store: Store) -> None:
    store.start_run("r1", "w.toml", ENV, SETTINGS)
    rng = np.random.default_rng(0)
    rounds = [rng.integers(1, 2**40, size=n).tolist() for n in (7, 7, 7)]
    rounds[0][0] = 2**62  # values beyond 32 bits survive
    warm = [10**9, 5, 123456789]
    store.add_trial("r1", "c", -1, "warmup", warm, None)
    # inserted out of order: samples() gives them back by round
    for r in (2, 0, 1):
        store.add_trial("r1", "c", r, "measure", rounds[r], sum(rounds[r]) + 17)
    store.add_trial("r1", "other", 0, "measure", [1, 2, 3], 6)

    got = store.samples("r1", "c")
    assert len(got) == 3
    for r in range(3):
        assert got[r].dtype == np.dtype("<i8")
        assert got[r].tolist() == rounds[r]
    assert [a.tolist() for a in store.samples("r1", "c", kind="warmup")] == [warm]
    assert [a.tolist() for a in store.samples("r1", "other")] == [[1, 2, 3]]
    assert store.samples("r1", "missing") == []
    block = store.db.execute(
        "SELECT block_ns, calls FROM trials WHERE run_id='r1' AND candidate_id='c' AND round=1"
    ).fetchone()
    assert block == (sum(rounds[1]) + 17, 7)


def test_a_rounds_figures_are_stored_with_it_and_a_phase_can_be_dropped(store: Store) -> None:
    store.start_run("r1", "w.toml", ENV, SETTINGS)
    extra = {"ttft_ns": [5, 6], "tokens": [8, 8]}
    store.add_trial("r1", "c", 0, "measure", [1, 2], 3, 1, extra)
    store.add_trial("r1", "c", 0, "concurrency-2", [4], 9)
    assert store.rounds("r1", "c") == [(0, [1, 2], 3, 1)]
    assert store.by_round("r1", "c", "measure:ttft_ns") == {0: [5, 6]}
    assert store.by_round("r1", "c", "measure:tokens") == {0: [8, 8]}
    # a transaction that fails stores none of the round's rows
    with pytest.raises(OverflowError):
        store.add_trial("r1", "c", 1, "measure", [1], 1, 0, {"tokens": [2**70]})
    assert store.by_round("r1", "c", "measure") == {0: [1, 2]}
    store.drop_trials("r1", "concurrency-")
    assert store.samples("r1", "c", "concurrency-2") == []
    assert store.by_round("r1", "c", "measure") == {0: [1, 2]}


def test_finish_run_with_document(store: Store) -> None:
    store.start_run("r1", "w.toml", ENV, SETTINGS)
    document = {
        "schema_version": 1,
        "run_id": "r1",
        "verdicts": [
            {"batch_size": 1, "winner": "fake-int8-b1"},
            {"batch_size": 32, "winner": None},
        ],
    }
    store.finish_run("r1", "done", document)
    rec = store.run("r1")
    assert rec["status"] == "done"
    assert rec["document"] == document
    [summary] = store.runs()
    assert summary["status"] == "done"
    assert summary["winners"] == [(1, "fake-int8-b1"), (32, None)]


def test_finish_run_without_document(store: Store) -> None:
    store.start_run("r1", "w.toml", ENV, SETTINGS)
    store.finish_run("r1", "interrupted", None)
    rec = store.run("r1")
    assert rec["status"] == "interrupted"
    assert rec["document"] is None
    assert store.runs()[0]["winners"] == []


def test_runs_newest_first_with_limit(store: Store, fake_clock: list[float]) -> None:
    for i, rid in enumerate(
        ["20260101-000000-aaaa", "20260101-000001-bbbb", "20260101-000002-cccc"]
    ):
        store.start_run(rid, f"w{i}.toml", ENV, SETTINGS)
    store.finish_run(
        "20260101-000001-bbbb", "done", {"verdicts": [{"batch_size": 1, "winner": "x-b1"}]}
    )
    runs = store.runs()
    assert [r["run_id"] for r in runs] == [
        "20260101-000002-cccc",
        "20260101-000001-bbbb",
        "20260101-000000-aaaa",
    ]
    assert [r["workload"] for r in runs] == ["w2.toml", "w1.toml", "w0.toml"]
    assert runs[1]["winners"] == [(1, "x-b1")]
    assert runs[0]["winners"] == [] and runs[0]["status"] == "running"
    assert runs[0]["created_at"] > runs[1]["created_at"] > runs[2]["created_at"]
    assert [r["run_id"] for r in store.runs(limit=1)] == ["20260101-000002-cccc"]


def test_run_by_full_id_and_unique_prefix(store: Store, fake_clock: list[float]) -> None:
    store.start_run("20260101-000000-aaaa", "a.toml", ENV, SETTINGS)
    store.start_run("20260101-000000-bbbb", "b.toml", ENV, SETTINGS)
    assert store.run("20260101-000000-aaaa")["workload"] == "a.toml"
    assert store.run("20260101-000000-bbbb")["workload"] == "b.toml"
    assert store.run("20260101-000000-a")["run_id"] == "20260101-000000-aaaa"
    assert store.run("20260101-000000-bb")["run_id"] == "20260101-000000-bbbb"
    with pytest.raises(UserError, match="ambiguous"):
        store.run("20260101")


def test_unknown_run_id_is_a_user_error(store: Store, store_path: Path) -> None:
    store.start_run("20260101-000000-aaaa", "a.toml", ENV, SETTINGS)
    with pytest.raises(UserError) as info:
        store.run("nope")
    assert "'nope'" in str(info.value)
    assert str(store_path) in str(info.value)
    assert info.value.exit_code == 2


def test_wal_mode_is_on(store: Store, store_path: Path) -> None:
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other = sqlite3.connect(str(store_path))
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent
    finally:
        other.close()


def test_schema_version_recorded_and_newer_store_refused(store_path: Path) -> None:
    s = Store(store_path)
    version = s.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    assert int(version) == store_mod.SCHEMA_VERSION
    s.db.execute(
        "UPDATE meta SET value = ? WHERE key='schema_version'", (str(store_mod.SCHEMA_VERSION + 1),)
    )
    s.close()
    with pytest.raises(UserError, match="newer"):
        Store(store_path)


def test_data_survives_abrupt_exit(store_path: Path) -> None:
    """A writer killed without close() loses nothing it committed."""
    script = textwrap.dedent(
        f"""\
        import os
        from bakeoff.store import Store
        s = Store({str(store_path)!r})
        s.start_run("r-crash", "w.toml", {{"e": 1}}, {{"s": 2}})
        s.put_candidate("r-crash", {{"id": "c1", "status": "ok", "reason": ""}})
        s.add_trial("r-crash", "c1", 0, "measure", [11, 22, 33], 66)
        s.add_trial("r-crash", "c1", 1, "measure", [44, 55, 66], 165)
        os._exit(0)  # no close, no checkpoint
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    s = Store(store_path)
    try:
        rec = s.run("r-crash")
        assert rec["status"] == "running"
        assert rec["environment"] == {"e": 1}
        assert [c["id"] for c in rec["candidates"]] == ["c1"]
        assert [a.tolist() for a in s.samples("r-crash", "c1")] == [[11, 22, 33], [44, 55, 66]]
    finally:
        s.close()


def test_two_connections_see_each_others_writes(store_path: Path) -> None:
    writer = Store(store_path)
    reader = Store(store_path)
    try:
        writer.start_run("r1", "w.toml", ENV, SETTINGS)
        writer.add_trial("r1", "c", 0, "measure", [1, 2], 3)
        assert reader.run("r1")["status"] == "running"
        assert [a.tolist() for a in reader.samples("r1", "c")] == [[1, 2]]
    finally:
        writer.close()
        reader.close()


def test_a_run_carried_to_another_store_keeps_its_rows_and_gains_its_node(
    store: Store, tmp_path: Path
) -> None:
    """What a cluster node's run becomes in the store of the machine that started it."""
    store.start_run("r1", "w", {"cpu": "x"}, {"quick": True})
    store.put_candidate("r1", {"id": "c", "status": "ok"})
    store.add_trial("r1", "c", 0, "measure", [5, 6, 7], 18, 1)
    store.finish_run("r1", "done", {"run_id": "r1", "environment": {"cpu": "x"}})
    rows = store.export_run("r1")
    with Store(tmp_path / "other.db") as other:
        assert other.import_run(rows, {"node": {"id": "n1", "type": "local"}}) == "r1"
        record = other.run("r1")
        assert record["environment"] == {"cpu": "x", "node": {"id": "n1", "type": "local"}}
        assert record["document"]["environment"]["node"]["id"] == "n1"
        assert [c["id"] for c in record["candidates"]] == ["c"]
        assert other.rounds("r1", "c") == [(0, [5, 6, 7], 18, 1)]
        with pytest.raises(UserError, match=r"run r1 is in .* already"):
            other.import_run(rows, {})
    with pytest.raises(UserError, match="no run 'nope'"):
        store.export_run("nope")


def test_a_sweeps_attempts_are_kept_as_they_start_and_end(store: Store) -> None:
    store.start_sweep("s1", ["a.toml", "b.toml"], {"cluster": "local:2"})
    attempt = {
        "workload": "a.toml", "attempt": 1, "run_id": None, "node_id": "n1",
        "node_type": "local", "status": "running", "reason": "",
    }  # fmt: skip
    store.put_sweep_attempt("s1", attempt)
    store.put_sweep_attempt("s1", {**attempt, "status": "done", "run_id": "r1"})
    store.put_sweep_attempt("s1", {**attempt, "workload": "b.toml", "status": "failed",
                                   "reason": "node lost: gone"})  # fmt: skip
    record = store.sweep("s1")
    assert record["workloads"] == ["a.toml", "b.toml"] and record["status"] == "running"
    assert [(a["workload"], a["status"], a["run_id"]) for a in record["attempts"]] == [
        ("a.toml", "done", "r1"),
        ("b.toml", "failed", None),
    ]
    store.set_sweep_status("s1", "done")
    assert store.sweep("s1")["status"] == "done"
    with pytest.raises(UserError, match="no sweep 'nope'"):
        store.sweep("nope")
