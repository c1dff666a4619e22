"""`bakeoff compare`: runs of one workload agree ('same'), a planted slowdown is flagged.

The fake runtime (virtual clock, seeded jitter) makes the timings deterministic,
so what is tested is compare's statistics and exit codes, not this machine.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from bakeoff import api
from bakeoff.compare import compare, compare_runs
from bakeoff.report.compare import print_comparison
from bakeoff.report.data import load


def _run(folder: Path, store: Path, options: str) -> str:
    """One quick fake run; the workload file is rewritten in place so both runs share its path."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "d.npz"
    if not data.exists():
        np.savez(data, input=np.random.default_rng(0).random((64, 8), dtype=np.float32))
    path = folder / "w.toml"
    path.write_text(
        f'name = "cmp"\n[model]\nkind = "fake"\noptions = {options}\n'
        f'[data]\npath = "d.npz"\n[quality]\nmetric = "cosine"\nmax_drop = 0.01\n'
        f'[search]\nruntimes = ["fake"]\nprecisions = ["fp32", "int8"]\nbatch_sizes = [1, 4]\n'
    )
    return api.run(str(path), api.RunOptions(quick=True, store=store)).run_id


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("compare")
    store = root / "store" / "bakeoff.db"
    base = "latency_ms = 1.0, per_sample_ms = 0.25, jitter = 0.03"
    # A and B: the same speeds, different jitter draws (another seed), as two runs
    # of one workload on one machine. C: int8 made 25% slower on purpose.
    a = _run(root / "w", store, f"{{ {base}, seed = 1 }}")
    b = _run(root / "w", store, f"{{ {base}, seed = 2 }}")
    slow = (
        "latency_ms = { fp32 = 1.0, int8 = 1.25 }, per_sample_ms = { fp32 = 0.25, int8 = 0.3125 }"
    )
    c = _run(root / "w", store, f"{{ {slow}, jitter = 0.03, seed = 3 }}")
    return {"store": store, "a": a, "b": b, "c": c}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_two_runs_of_one_workload_are_the_same(runs: dict[str, Any]) -> None:
    cmp = compare(runs["a"], runs["b"], runs["store"])
    rows = {r.candidate: r for r in cmp.rows}
    assert set(rows) == {"fake-fp32-b1", "fake-fp32-b4", "fake-int8-b1", "fake-int8-b4"}
    for r in rows.values():
        assert r.change == "same", r
        assert r.ratio_lo <= r.ratio <= r.ratio_hi
        assert abs(r.ratio - 1.0) < cmp.margin
    assert rows["fake-fp32-b1"].objective == "latency"
    assert rows["fake-fp32-b4"].objective == "throughput"
    assert cmp.margin == 0.05  # the run-to-run default (the runs' own margin is 0.02)
    # one machine, one workload file, the same settings (measured import times and
    # calls per round differ from run to run, and are no setting)
    assert not cmp.environment and not cmp.settings and not cmp.runtime_settings
    assert not cmp.only_a and not cmp.only_b
    assert cmp.regressions(5.0) == []


def test_planted_slowdown_is_flagged(runs: dict[str, Any]) -> None:
    cmp = compare(runs["a"], runs["c"], runs["store"])
    rows = {r.candidate: r for r in cmp.rows}
    for bs in (1, 4):
        assert rows[f"fake-fp32-b{bs}"].change == "same"
        slow = rows[f"fake-int8-b{bs}"]
        assert slow.change == "slower", slow
    # latency: B/A of p50 is about 1.25; throughput: B/A is about 1/1.25
    assert rows["fake-int8-b1"].ratio == pytest.approx(1.25, rel=0.03)
    assert rows["fake-int8-b4"].ratio == pytest.approx(0.8, rel=0.03)
    assert {r.candidate for r in cmp.regressions(10.0)} == {"fake-int8-b1", "fake-int8-b4"}
    assert cmp.regressions(30.0) == []
    # a wider margin than the slowdown makes it 'same'... only if the CI fits inside
    wide = compare(runs["a"], runs["c"], runs["store"], margin=0.4)
    assert {r.change for r in wide.rows} == {"same"}


def test_cli_regression_gate_exit_codes(runs: dict[str, Any]) -> None:
    store = str(runs["store"])
    same = _cli("compare", runs["a"], runs["b"], "--store", store, "--fail-on-regression", "5")
    assert same.returncode == 0, same.stderr
    assert "same environment fingerprint" in same.stdout
    assert "no candidate is slower by more than 5%" in same.stdout

    slow = _cli("compare", runs["a"], runs["c"], "--store", store, "--fail-on-regression", "10")
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert "regression: fake-int8-b1" in slow.stderr
    assert "regression: fake-int8-b4" in slow.stderr
    assert "fake-fp32-b1" not in slow.stderr
    assert "slower" in slow.stdout

    as_json = _cli("compare", runs["a"], runs["c"], "--store", store, "--json")
    assert as_json.returncode == 0  # no gate asked for
    payload = json.loads(as_json.stdout)
    changes = {r["candidate"]: r["change"] for r in payload["candidates"]}
    assert changes["fake-int8-b1"] == "slower" and changes["fake-fp32-b1"] == "same"

    bad = _cli("compare", runs["a"], "no-such-run", "--store", store)
    assert bad.returncode == 2
    assert "no run 'no-such-run'" in bad.stderr


def test_run_b_may_come_from_another_store(
    runs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A baseline kept in its own store (say, from an earlier CI job) against a new run."""
    root = tmp_path_factory.mktemp("other-store")
    other = root / "bakeoff.db"
    base = "latency_ms = 1.0, per_sample_ms = 0.25, jitter = 0.03"
    later = _run(runs["store"].parent.parent / "w", other, f"{{ {base}, seed = 4 }}")
    cmp = compare(runs["a"], later, runs["store"], store_b=other)
    assert {r.change for r in cmp.rows} == {"same"}
    gate = _cli(
        "compare",
        runs["a"],
        later,
        "--store",
        str(runs["store"]),
        "--store-b",
        str(other),
        "--fail-on-regression",
        "5",
    )
    assert gate.returncode == 0, gate.stderr
    missing = _cli(
        "compare", runs["a"], runs["b"], "--store", str(runs["store"]), "--store-b", str(other)
    )
    assert missing.returncode == 2
    assert f"no run '{runs['b']}' in {other}" in " ".join(missing.stderr.split())


def test_environment_differences_come_first(runs: dict[str, Any]) -> None:
    a = load(runs["a"], runs["store"])
    b = load(runs["b"], runs["store"])
    env = copy.deepcopy(b.record["environment"])
    env["cpu"]["model"] = "Another CPU"
    env["packages"]["onnxruntime"] = "0.0.1"
    env["load_average"] = [9.0, 9.0, 9.0]  # changes minute to minute: not a difference
    b.record["environment"] = env
    b.record["settings"] = {**b.record["settings"], "threads": 99}
    cmp = compare_runs(a, b)
    assert [(d.key, d.b) for d in cmp.environment] == [
        ("cpu.model", "Another CPU"),
        ("packages.onnxruntime", "0.0.1"),
    ]
    assert [(d.key, d.b) for d in cmp.settings] == [("threads", 99)]
    console = Console(record=True, width=200)
    print_comparison(cmp, console)
    text = console.export_text()
    assert text.index("cpu.model") < text.index("fake-fp32-b1")
    assert "packages.onnxruntime: '" in text and "-> '0.0.1'" in text


def test_why_a_candidate_is_not_compared() -> None:
    from bakeoff.compare import _not_comparable

    def c(status: str, reason: str = "", measured: bool = True) -> dict[str, Any]:
        figures = {"p50": 1.0} if measured else {}
        return {"status": status, "reason": reason, "latency_ms": figures, "throughput": figures}

    pending = "not finished (the run was interrupted)"
    assert _not_comparable(c("pending"), c("pending")) == f"in both runs {pending}"
    assert _not_comparable(c("ok"), c("pending")) == f"in B {pending}"
    assert _not_comparable(c("failed", "boom"), c("ok")) == "in A failed: boom"
    gate = "quality gate: drop 0.3"
    assert _not_comparable(c("rejected", gate), c("rejected", gate)) == (
        f"in both runs rejected: {gate}"
    )
    assert _not_comparable(c("ok", measured=False), c("ok")) == "not measured in A"
    assert _not_comparable(c("ok"), c("ok")) == ""
