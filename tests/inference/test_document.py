"""Round trips by construction: RunOptions, Candidate and Quality each go to JSON and
back through one pair of functions; the result document keeps the shape it had
before them; a run stored before them still resumes."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from bakeoff import api
from bakeoff.backends import Variant
from bakeoff.candidates import Candidate, candidate_document
from bakeoff.errors import UserError
from bakeoff.judge.quality import Quality
from bakeoff.paths import RunFolder
from bakeoff.store import Store
from fake_workload import write_fake_workload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _through_json(doc: dict[str, Any]) -> dict[str, Any]:
    """As the store keeps it: JSON text."""
    return json.loads(json.dumps(doc))


def _unexercised(x: Any, default: Any, skip: Collection[str] = ()) -> list[str]:
    """Fields of `x` still at their default: a field added later must be given a value
    here too, or the round trip would not test it."""
    return [
        f.name
        for f in dataclasses.fields(x)
        if f.name not in skip and getattr(x, f.name) == getattr(default, f.name)
    ]


# ---------------------------------------------------------------- the three pairs

# How one invocation runs, not what the run is: a resume is told where the store and
# the JSON are, and runs with the default build timeout and no fixed-seconds mode.
NOT_STORED = {"store", "json_path", "build_timeout_s", "fixed_seconds"}


def test_run_options_round_trip_through_the_stored_settings(tmp_path: Path) -> None:
    opts = api.RunOptions(
        runtimes=["onnxruntime", "openvino"],
        precisions=["fp32", "int8"],
        batch_sizes=[1, 8],
        budget_s=33.5,
        trial_timeout_s=42.0,
        quick=True,
        store=tmp_path / "s.db",
        json_path=tmp_path / "out.json",
        threads=3,
        seed=7,
        margin=0.04,
        ci_target=0.03,
        scenario="server",
        latency_bound_ms=25.0,
        cold_starts=3,
        target="edge-intel",
        constraints={"max_p99_ms": 12.5},
        worker_per_batch_size=True,
        share=["torch-fp32", "onnxruntime-int8-dynamic"],
        data="/data/inputs.npz",
    )
    assert _unexercised(opts, api.RunOptions(), NOT_STORED - {"store", "json_path"}) == []
    settings = _through_json(opts.to_settings())
    back = api.RunOptions.from_settings(settings, store=opts.store, json_path=opts.json_path)
    assert back == opts
    # The stored keys are the ones runs have always been stored with.
    assert set(settings) == {
        "batch_sizes",
        "threads",
        "quick",
        "budget_s",
        "trial_timeout_s",
        "seed",
        "explicit_runtimes",
        "explicit_precisions",
        "margin",
        "ci_target",
        "scenario",
        "latency_bound_ms",
        "cold_starts",
        "target",
        "explicit_constraints",
        "worker_per_batch_size",
        "split_share",
        "data",
    }


def test_run_options_from_settings_stored_before_an_option_existed() -> None:
    # A run stored before (say) scenarios and targets: those run with their defaults,
    # but one stored before workers were shared goes on with a worker per batch size.
    old = {"workload_ref": "builtin:digits", "batch_sizes": [1], "threads": 2, "quick": True}
    opts = api.RunOptions.from_settings(old, store="x.db")
    assert opts == api.RunOptions(
        batch_sizes=[1], threads=2, quick=True, store="x.db", worker_per_batch_size=True
    )


def test_quality_round_trip() -> None:
    head = Quality("cosine", 0.99, 1.0, 0.01, 0.05, output="scores")
    q = Quality(
        "cosine",
        0.97,
        1.0,
        0.03,
        0.05,
        worst=0.8,
        non_finite=2,
        output="boxes",
        outputs=(head, Quality("cosine", 0.97, 1.0, 0.03, 0.05, output="boxes")),
        matched="by shape and position",
    )
    assert _unexercised(q, Quality("", 0.0, 0.0, 0.0, 0.0)) == []
    assert Quality.from_json(_through_json(q.to_json())) == q
    # Documents older than `worst` and `non_finite` lack them.
    old = {"metric": "max_abs", "value": 0.1, "reference": 0.0, "drop": 0.1, "max_drop": 0.2}
    assert Quality.from_json(old) == Quality("max_abs", 0.1, 0.0, 0.1, 0.2)


# Measured samples are not in a candidate's document: the store keeps them as trials
# (inference.resume.restore reads them back from there).
IN_TRIALS = {"warmup_ns", "rounds_ns", "block_ns", "round_slots"}


def _candidate() -> Candidate:
    """Every documented field away from its default, with values the document keeps
    exactly (it rounds peak RSS to 0.1 MiB, model size to 0.001 MiB, cold starts to µs)."""
    return Candidate(
        Variant("onnxruntime", "int8", "static"),
        4,
        label="q8",
        options={"intra_op_threads": 2},
        status="rejected",
        reason="quality gate: cosine drop 0.03 exceeds max_drop 0.01",
        notes=["INT8 is emulated on this CPU"],
        artifact={"exporter": "dynamo", "cache_hit": True},
        build_s=1.25,
        settings={"calls_per_round": 13, "import_s": 0.0042, "compile_s": 0.5},
        quality=Quality("cosine", 0.97, 1.0, 0.03, 0.01, worst=0.8),
        quality_alt=Quality("cosine", 0.96, 1.0, 0.04, 0.01, worst=0.7),
        load_s=0.5,
        first_call_s=0.125,
        peak_rss_mb=123.4,
        model_bytes=3 * 2**20 + 2**19,
        stopped="raced out after 5 rounds",
        constraint_violations=["p99 3.1 ms > max_p99_ms 3"],
        validity="noisy",
        validity_reason="other processes were busy",
        server={"scenario": "server", "max_qps": 12.5},
        offline={"scenario": "offline", "best_streams": 2},
        cold_starts={
            "load": [0.5, 0.25, 0.375],
            "first_call": [0.125, 0.0625, 0.1],
            "import": [0.0042, 0.004, 0.0041],
        },
        cold_start_error="cold start 4 failed: worker exited",
        efficiency={
            "flops_per_sample": 675072,
            "achieved_gflops": 1.35,
            "peak_gflops": 184.8,
            "fraction": 0.007305,
        },
        worker={
            "quality_batch_size": 8,
            "batch_sizes": [1, 8],
            "first_call": "cold",
            "loaded_alone": False,
            "peak_memory": "load and first call, then the batch size timed",
        },
    )


def test_candidate_round_trip() -> None:
    c = _candidate()
    assert _unexercised(c, Candidate(Variant("", ""), 1), IN_TRIALS) == []
    assert Candidate.from_json(_through_json(c.to_json())) == c


def test_candidate_document_round_trips_with_its_rounds_put_back() -> None:
    c = _candidate()
    c.rounds_ns = [[1_000_000 + 1000 * i + j for j in range(20)] for i in range(6)]
    c.block_ns = [sum(r) for r in c.rounds_ns]
    c.round_slots = [0, 0, 0, 1, 1, 1]
    doc = _through_json(candidate_document(c))
    back = Candidate.from_json(doc)
    back.rounds_ns, back.block_ns, back.round_slots = c.rounds_ns, c.block_ns, c.round_slots
    assert _through_json(candidate_document(back)) == doc
    # The figures come from the rounds, not from the document.
    assert doc["latency_ms"]["rounds"] == 6 and doc["throughput"] is not None
    assert candidate_document(Candidate.from_json(doc))["latency_ms"] is None


# ---------------------------------------------------------------- the document's shape

# `bakeoff run builtin:digits --quick`, saved before the round trips were built in.
DIGITS = json.loads((FIXTURES / "digits_quick_document.json").read_text())


def _key_paths(x: Any, at: str = "") -> set[str]:
    """Every key path in a JSON value; list items share their list's path ([])."""
    out: set[str] = set()
    if isinstance(x, dict):
        for k, v in x.items():
            out.add(f"{at}.{k}")
            out |= _key_paths(v, f"{at}.{k}")
    elif isinstance(x, list):
        for v in x:
            out |= _key_paths(v, f"{at}[]")
    return out


# Keys that differ by workload kind, and so are left out of the comparison with the
# fake run: they are data, not the document's shape.
#   .candidates[].settings.*  each runtime's own settings (torch: torch_version,
#                             compile_mode...; onnxruntime: providers, quantization...;
#                             the fake runtime: virtual_clock, latency_ms)
#   .settings.left_out.*      keyed by variant id (digits: openvino-int8-nncf-aa)
#   .advice.*                 the advice (present for fake models too; its `proposed`
#                             list is empty for them): advise.py's, not compared below
#                             the top level
# Every other key the digits document has, a fake run has as well: top-level,
# candidate, verdict, settings and workload keys are the same sets.
BY_KIND = (".candidates[].settings.", ".settings.left_out.")


def _shape(doc: dict[str, Any]) -> set[str]:
    parts = ("candidates", "verdicts", "settings", "workload")
    return {
        p
        for p in _key_paths({k: doc[k] for k in parts})
        if not any(p.startswith(prefix) for prefix in BY_KIND)
    }


@pytest.fixture(scope="module")
def fake_document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("shape")
    write_fake_workload(
        root,
        "shape",
        '[quality]\nmetric = "cosine"\nmax_drop = 0.01\n'
        '[search]\nruntimes = ["fake"]\nprecisions = ["fp32", "int8"]\nbatch_sizes = [1]\n',
    )
    out = root / "result.json"
    opts = api.RunOptions(quick=True, store=root / "store" / "bakeoff.db", json_path=out)
    api.run(str(root / "w.toml"), opts)
    doc: dict[str, Any] = json.loads(out.read_text())  # the document as written
    return doc


# Candidate keys added since DIGITS was saved, each by its issue; nothing else may be.
#   efficiency  issue 19: FLOPs per sample, achieved and peak GFLOP/s, their fraction
#   worker      issue 19: how its measuring worker was shared and loaded
ADDED = {"efficiency", "worker"}
# Run settings added since, likewise.
#   worker_per_batch_size  issue 19: --worker-per-batch-size
#   split_share            issue 23: a node's share of `bakeoff run --split` (None: all)
#   data                   issue 47: `--data`, the data of a model file given alone
SETTINGS_ADDED = {"worker_per_batch_size", "split_share", "data"}
# Workload keys added since, likewise.
#   text  issue 20: where text was tokenized, so an export takes text again (serve)
#   reference_outputs  issue 44: the worker and chunk size the reference's outputs
#         came from, and the chunk sizes that failed before it
#   inputs  issue 47: "generated" from the model's signature, or "given"
WORKLOAD_ADDED = {"text", "reference_outputs", "inputs"}
# Verdict keys added since, likewise.
#   recommended, recommendation  issue 45: the candidate a careful engineer would take
#         among those speed does not separate, and the rule that named it
VERDICT_ADDED = {"recommended", "recommendation"}


def test_the_result_document_keeps_its_keys(fake_document: dict[str, Any]) -> None:
    doc = fake_document
    assert set(doc) == set(DIGITS)
    for c in doc["candidates"]:
        assert set(c) == set(DIGITS["candidates"][0]) | ADDED, c["id"]
    assert all(set(d) == set(DIGITS["candidates"][0]) for d in DIGITS["candidates"])
    for v in doc["verdicts"]:
        assert set(v) == set(DIGITS["verdicts"][0]) | VERDICT_ADDED
    assert set(doc["settings"]) == set(DIGITS["settings"]) | SETTINGS_ADDED
    assert set(doc["workload"]) == set(DIGITS["workload"]) | WORKLOAD_ADDED


def test_no_nested_key_of_the_document_is_gone(fake_document: dict[str, Any]) -> None:
    gone = _shape(DIGITS) - _shape(fake_document)
    assert not gone, sorted(gone)


# ---------------------------------------------------------------- an old run resumes


def _measured(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT candidate_id, round FROM trials WHERE kind = 'measure'"
        ).fetchall()


def test_a_run_stored_before_the_round_trips_resumes(tmp_path: Path) -> None:
    folder = tmp_path / "pre_refactor_run"
    shutil.copytree(FIXTURES / "pre_refactor_run", folder)
    db = folder / "store" / "bakeoff.db"
    with sqlite3.connect(db) as conn:
        ((run_id, status, text),) = conn.execute("SELECT run_id, status, settings FROM runs")
        settings = json.loads(text)
        # It was stored where it was made; it is here now.
        settings["workload_ref"] = str(folder / "workload.toml")
        conn.execute(
            "UPDATE runs SET settings = ? WHERE run_id = ?", (json.dumps(settings), run_id)
        )
    assert status == "interrupted"
    assert RunFolder.of(db, run_id).data.exists()
    # What the resume runs with, read from the settings as stored then.
    assert api.RunOptions.from_settings(settings, store=db) == api.RunOptions(
        batch_sizes=[1, 2],
        threads=2,
        quick=True,
        budget_s=60.0,
        margin=0.02,
        ci_target=0.02,
        store=db,
        worker_per_batch_size=True,
    )
    before = _measured(db)
    out = tmp_path / "resumed.json"
    try:
        result = api.resume(run_id, db, json_path=out)
    except UserError as exc:
        # Refused only when this machine's runtimes are not the ones it was measured
        # with; then the run stays as it was.
        assert "installed libraries changed since run" in str(exc), exc
        assert _measured(db) == before
        with Store(db) as s:
            assert s.run(run_id)["status"] == "interrupted"
        return
    after = _measured(db)
    assert len(after) == len(set(after)), "a trial was measured twice"
    assert set(before) < set(after)
    with Store(db) as s:
        record = s.run(run_id)
    assert record["status"] == "done"
    doc = json.loads(out.read_text())
    assert doc == record["document"] == _through_json(result.document)
    assert set(doc["settings"]) == set(settings) | SETTINGS_ADDED
    assert set(settings) == set(DIGITS["settings"])
    # It was measured with a worker per batch size, and goes on so.
    assert doc["settings"]["worker_per_batch_size"] is True
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert sorted(by_id) == ["a-b1", "a-b2", "b-b1", "b-b2"]
    assert all(c["status"] == "ok" for c in by_id.values())
    # a-b1 and b-b1 had finished: kept as they were stored, not measured again.
    for cid in ("a-b1", "b-b1"):
        assert {r for c, r in after if c == cid} == {r for c, r in before if c == cid}
        assert by_id[cid]["latency_ms"]["rounds"] == 5
    assert by_id["a-b1"]["stopped"].startswith("raced out after 5 rounds")
    assert by_id["a-b1"]["settings"]["calls_per_round"] == 13
    # a-b2 and b-b2 had measured one round: continued from it.
    for cid in ("a-b2", "b-b2"):
        assert (cid, 0) in before and by_id[cid]["latency_ms"]["rounds"] > 1
