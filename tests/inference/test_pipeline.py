"""End-to-end runs of the fake runtime: quality gate, ties, store, JSON document, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bakeoff import api
from bakeoff.errors import UserError

DOC_KEYS = {"schema_version", "run_id", "workload", "environment", "candidates", "verdicts"}
CANDIDATE_KEYS = {
    "id",
    "runtime",
    "precision",
    "batch_size",
    "status",
    "reason",
    "quality",
    "latency_ms",
    "throughput",
    "peak_rss_mb",
    "cold_start_s",
}
VERDICT_KEYS = {
    "batch_size",
    "objective",
    "winner",
    "baseline",
    "speedup",
    "ranking",
    "ties",
    "reason",
    "standing",
    "beats_baseline",
    "headline",
    "points",
    "details",
    "comparisons",
    "level",
    "margin",
}


def _workload(folder: Path, options: str, batch_sizes: str = "[1, 4]") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "d.npz", input=np.random.default_rng(0).random((64, 8), dtype=np.float32))
    path = folder / "w.toml"
    path.write_text(
        f'name = "{folder.name}"\n[model]\nkind = "fake"\noptions = {options}\n'
        f'[data]\npath = "d.npz"\n[quality]\nmetric = "cosine"\nmax_drop = 0.01\n'
        f'[search]\nruntimes = ["fake"]\nprecisions = ["fp32", "int8"]\n'
        f"batch_sizes = {batch_sizes}\n"
    )
    return path


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """int8 is faster but distorts its outputs far beyond max_drop."""
    root = tmp_path_factory.mktemp("gated")
    path = _workload(
        root / "gated",
        "{ latency_ms = { fp32 = 2.0, int8 = 1.0 }, error = { int8 = 0.5 } }",
    )
    store = root / "store" / "bakeoff.db"
    json_path = root / "out" / "result.json"
    result = api.run(str(path), api.RunOptions(quick=True, store=store, json_path=json_path))
    return {"result": result, "store": store, "json_path": json_path, "workload": path}


@pytest.fixture(scope="module")
def tied(tmp_path_factory: pytest.TempPathFactory) -> api.RunResult:
    root = tmp_path_factory.mktemp("tied")
    path = _workload(root / "tied", "{ latency_ms = 1.5 }")
    return api.run(str(path), api.RunOptions(quick=True, store=root / "store" / "bakeoff.db"))


def _cands(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in doc["candidates"]}


def _verdict(doc: dict[str, Any], bs: int) -> dict[str, Any]:
    [v] = [v for v in doc["verdicts"] if v["batch_size"] == bs]
    return v


# ---------------------------------------------------------------- the quality gate


def test_quality_gate_rejects_distorting_variant(gated: dict[str, Any]) -> None:
    result: api.RunResult = gated["result"]
    doc = result.document
    cands = _cands(doc)
    assert set(cands) == {"fake-fp32-b1", "fake-fp32-b4", "fake-int8-b1", "fake-int8-b4"}
    for bs in (1, 4):
        bad = cands[f"fake-int8-b{bs}"]
        assert bad["status"] == "rejected"
        assert "max_drop" in bad["reason"]
        assert "quality gate" in bad["reason"]
        assert bad["quality"]["drop"] > 0.01
        assert bad["latency_ms"] is None  # a rejected variant is never timed
        if bs == 4:  # rejected at batch size 1: the same variant is not loaded again
            # Its worker ran the quality pass once, at the largest batch size.
            assert cands["fake-int8-b1"]["worker"]["quality_batch_size"] == 4
            assert (
                "checked at batch size 4 by the worker of fake-int8-b1; "
                "the same variant is not loaded again" in bad["reason"]
            )
            assert bad["quality"] == cands["fake-int8-b1"]["quality"]
            assert bad["cold_start_s"]["load"] is None
        good = cands[f"fake-fp32-b{bs}"]
        assert good["status"] == "ok"
        assert good["quality"]["drop"] == pytest.approx(0.0, abs=1e-9)

        v = _verdict(doc, bs)
        assert v["winner"] == f"fake-fp32-b{bs}"  # not the faster, rejected int8
        assert f"fake-int8-b{bs}" not in v["ranking"]
        assert v["ranking"] == [f"fake-fp32-b{bs}"]
    assert result.exit_code == 0


def test_rejected_variant_is_not_timed_in_store(gated: dict[str, Any]) -> None:
    from bakeoff.store import Store

    s = Store(gated["store"])
    try:
        run_id = gated["result"].run_id
        assert s.samples(run_id, "fake-int8-b1") == []
        measured = s.samples(run_id, "fake-fp32-b1")
        doc_c = _cands(gated["result"].document)["fake-fp32-b1"]
        assert len(measured) == doc_c["latency_ms"]["rounds"]
        assert sum(len(a) for a in measured) == doc_c["latency_ms"]["n"]
    finally:
        s.close()


# ---------------------------------------------------------------- ties


def test_equal_latency_precisions_are_tied(tied: api.RunResult) -> None:
    doc = tied.document
    for c in doc["candidates"]:
        assert c["status"] == "ok", c
    for bs in (1, 4):
        v = _verdict(doc, bs)
        ids = {f"fake-fp32-b{bs}", f"fake-int8-b{bs}"}
        assert v["winner"] in ids
        assert set(v["ranking"]) == ids
        assert len(v["ties"]) == 1
        assert set(v["ties"][0]) == ids
        # the baseline (fp32) and int8 are not separated: no speedup is claimed
        assert v["standing"] in ("baseline-leads", "baseline-tied")
        assert v["headline"].startswith(f"No candidate beat the baseline fake-fp32-b{bs}")
        assert "not separated" in v["points"][0]
    assert tied.exit_code == 0


# ---------------------------------------------------------------- document and store


def test_json_document_has_documented_shape(gated: dict[str, Any]) -> None:
    doc = json.loads(gated["json_path"].read_text())
    assert set(doc) >= DOC_KEYS
    assert doc["schema_version"] == api.SCHEMA_VERSION
    assert doc["run_id"] == gated["result"].run_id
    assert doc["workload"]["name"] == "gated"
    assert doc["workload"]["origin"] == str(gated["workload"])
    assert isinstance(doc["environment"], dict) and doc["environment"]
    assert len(doc["candidates"]) == 4
    for c in doc["candidates"]:
        assert set(c) >= CANDIDATE_KEYS, c["id"]
        assert c["runtime"] == "fake"
        assert c["precision"] in ("fp32", "int8")
        assert c["batch_size"] in (1, 4)
        assert isinstance(c["reason"], str)
        assert {"metric", "value", "reference", "drop"} <= set(c["quality"])
        assert {"load", "first_call"} <= set(c["cold_start_s"])
        if c["status"] != "ok":
            continue
        lat = c["latency_ms"]
        assert {"p50", "p90", "p99", "mean", "n", "ci95"} <= set(lat)
        assert lat["n"] > 0
        for name in ("p50", "p90", "p99", "mean"):
            lo, hi = lat["ci95"][name]
            assert lo <= lat[name] <= hi
        thr = c["throughput"]
        assert {"samples_per_s", "ci95"} <= set(thr)
        assert thr["ci95"][0] <= thr["samples_per_s"] <= thr["ci95"][1]
        assert c["peak_rss_mb"] > 0
        assert c["cold_start_s"]["load"] >= 0 and c["cold_start_s"]["first_call"] >= 0
        # fp32 at 2 ms a call: p50 near 2 ms, throughput near batch / 2 ms
        assert lat["p50"] == pytest.approx(2.0, rel=0.05)
        assert thr["samples_per_s"] == pytest.approx(c["batch_size"] / 0.002, rel=0.05)
    assert [v["batch_size"] for v in doc["verdicts"]] == [1, 4]
    for v in doc["verdicts"]:
        assert set(v) >= VERDICT_KEYS
        assert {"value", "ci95"} <= set(v["speedup"])
        assert isinstance(v["reason"], str) and v["reason"]
    assert _verdict(doc, 1)["objective"] == "latency"
    assert _verdict(doc, 4)["objective"] == "throughput"
    # the file is the same document the run returned
    assert doc == json.loads(json.dumps(gated["result"].document))


def test_results_are_in_the_store(gated: dict[str, Any]) -> None:
    run_id = gated["result"].run_id
    rec = api.show_run(run_id, gated["store"])
    assert rec["run_id"] == run_id
    assert rec["status"] == "done"
    assert rec["document"] == json.loads(gated["json_path"].read_text())
    assert {c["id"]: c["status"] for c in rec["candidates"]} == {
        "fake-fp32-b1": "ok",
        "fake-fp32-b4": "ok",
        "fake-int8-b1": "rejected",
        "fake-int8-b4": "rejected",
    }
    assert api.show_run(run_id[:-1], gated["store"])["run_id"] == run_id  # unique prefix

    runs = api.list_runs(gated["store"])
    [summary] = [r for r in runs if r["run_id"] == run_id]
    assert summary["status"] == "done"
    assert summary["candidates"] == 4
    assert summary["winners"] == [(1, "fake-fp32-b1"), (4, "fake-fp32-b4")]


def test_show_run_unknown_id_and_missing_store(gated: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no run 'nope'"):
        api.show_run("nope", gated["store"])
    with pytest.raises(UserError, match="no store"):
        api.show_run("x", tmp_path / "missing.db")
    assert api.list_runs(tmp_path / "missing.db") == []
    assert not (tmp_path / "missing.db").exists()


# ---------------------------------------------------------------- the CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed `bakeoff` script, or the module when no script sits beside python."""
    script = Path(sys.executable).parent / "bakeoff"
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "bakeoff.cli"]
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_cli_ls_and_show(gated: dict[str, Any]) -> None:
    run_id = gated["result"].run_id
    store = str(gated["store"])

    ls = _cli("ls", "--store", store)
    assert ls.returncode == 0, ls.stderr
    assert run_id in ls.stdout
    assert "fake-fp32-b1" in ls.stdout  # the winners column

    show = _cli("show", run_id, "--store", store)
    assert show.returncode == 0, show.stderr
    assert run_id in show.stdout
    assert "fake-int8-b1" in show.stdout

    as_json = _cli("show", run_id, "--store", store, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["run_id"] == run_id


def test_cli_show_unknown_run_exits_2(gated: dict[str, Any]) -> None:
    proc = _cli("show", "nope", "--store", str(gated["store"]))
    assert proc.returncode == 2
    assert "nope" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
