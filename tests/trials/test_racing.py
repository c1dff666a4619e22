"""Effect-size verdicts, racing, adaptive stopping, explicit candidates and resume,
on the fake runtime (deterministic virtual clock)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from bakeoff import api
from bakeoff.backends import Variant
from bakeoff.candidates import Candidate
from bakeoff.paths import RunFolder
from bakeoff.report.charts import num
from bakeoff.report.terminal import print_result
from bakeoff.trials.validity import set_validity
from fake_workload import race_workload


def _two(a: str, b: str) -> str:
    return f"""
    [[candidates]]
    label = "a"
    runtime = "fake"
    options = {a}

    [[candidates]]
    label = "b"
    runtime = "fake"
    options = {b}
    """


def _run(path: Path, store: Path, **kw: object) -> dict:
    opts = api.RunOptions(quick=True, store=store, **kw)  # type: ignore[arg-type]
    return api.run(str(path), opts).document


@pytest.mark.parametrize("seed", range(5))
def test_identical_candidates_come_out_tied(tmp_path: Path, seed: int) -> None:
    same = f"{{ latency_ms = 2.0, jitter = 0.05, seed = {seed} }}"
    doc = _run(race_workload(tmp_path, _two(same, same)), tmp_path / "s.db")
    v = doc["verdicts"][0]
    assert v["ties"] and sorted(v["ties"][0]) == ["a-b1", "b-b1"], v["reason"]
    assert v["headline"].startswith("No candidate beat the baseline a-b1: ")
    assert any("not separated" in p for p in v["points"])


@pytest.mark.parametrize("seed", range(5))
def test_ten_percent_difference_is_ranked_right_with_ci_excluding_one(
    tmp_path: Path, seed: int
) -> None:
    fast = f"{{ latency_ms = 1.0, jitter = 0.05, seed = {seed} }}"
    slow = f"{{ latency_ms = 1.1, jitter = 0.05, seed = {seed} }}"
    doc = _run(race_workload(tmp_path, _two(slow, fast)), tmp_path / "s.db")
    v = doc["verdicts"][0]
    assert v["ranking"] == ["b-b1", "a-b1"]
    assert v["ties"] == []


def test_a_close_call_is_decided_by_three_processes_each(tmp_path: Path) -> None:
    # 5% apart: within the close-call zone, so two pairs of processes are not enough
    a, b = "{ latency_ms = 1.05, jitter = 0.01 }", "{ latency_ms = 1.0, jitter = 0.01 }"
    doc = _run(race_workload(tmp_path, _two(a, b)), tmp_path / "s.db")
    [v] = doc["verdicts"]
    assert v["ranking"] == ["b-b1", "a-b1"] and v["ties"] == [], v["reason"]
    assert 1.0 < v["speedup"]["ci95"][0] < 1.1
    for c in doc["candidates"]:
        assert c["latency_ms"]["processes"] == 3
        assert c["stopped"].startswith("stopped: every comparison decided"), c["stopped"]
    with sqlite3.connect(tmp_path / "s.db") as conn:
        slots = {p for (p,) in conn.execute("SELECT DISTINCT process FROM trials")}
    assert slots == {0, 1, 2}
    # the baseline is the first hand-written candidate: b is ~1.1x faster than a
    assert v["baseline"] == "a-b1" and v["speedup"]["ci95"][0] > 1.0


def test_a_clearly_slower_candidate_is_raced_out_early(tmp_path: Path) -> None:
    cands = _two("{ latency_ms = 1.0, jitter = 0.05 }", "{ latency_ms = 1.0, jitter = 0.05 }")
    cands += """
    [[candidates]]
    label = "slow"
    runtime = "fake"
    options = { latency_ms = 3.0, jitter = 0.05 }
    """
    doc = _run(race_workload(tmp_path, cands), tmp_path / "s.db")
    by_id = {c["id"]: c for c in doc["candidates"]}
    slow = by_id["slow-b1"]
    assert slow["status"] == "ok"
    # 3x slower in every round: out after 3 rounds, before the minimum of 5, and its
    # fewer rounds are not too few.
    assert slow["stopped"].startswith("raced out early, after 3 rounds"), slow["stopped"]
    assert slow["latency_ms"]["rounds"] == 3
    assert (slow["validity"], slow["validity_reason"]) == ("valid", "")
    [v] = doc["verdicts"]
    assert v["ranking"][-1] == "slow-b1" and "slow-b1" not in v["ties"]
    # the two close ones went on to the minimum and beyond
    assert all(by_id[c]["latency_ms"]["rounds"] >= 5 for c in ("a-b1", "b-b1"))


@pytest.mark.parametrize(
    ("a", "slow", "why"),
    [
        # the baseline (the first hand-written candidate) is never raced out early:
        # the speedups are over its rounds
        (3.0, 1.0, "raced out after 5 rounds"),
        # a gap under GROSS_GAP waits for the minimum rounds
        (1.0, 1.2, "raced out after 5 rounds"),
    ],
)
def test_only_a_gross_gap_races_a_candidate_out_before_the_minimum(
    tmp_path: Path, a: float, slow: float, why: str
) -> None:
    cands = _two(f"{{ latency_ms = {a}, jitter = 0.02 }}", "{ latency_ms = 1.0, jitter = 0.02 }")
    cands += f"""
    [[candidates]]
    label = "slow"
    runtime = "fake"
    options = {{ latency_ms = {slow}, jitter = 0.02 }}
    """
    doc = _run(race_workload(tmp_path, cands), tmp_path / "s.db")
    by_id = {c["id"]: c for c in doc["candidates"]}
    loser = by_id["a-b1"] if a > 1.0 else by_id["slow-b1"]
    assert loser["stopped"].startswith(why), loser["stopped"]
    assert loser["latency_ms"]["rounds"] == 5 and loser["validity"] == "valid"


def test_sampling_stops_once_everything_is_decided(tmp_path: Path) -> None:
    steady = "{ latency_ms = 1.0, jitter = 0.001 }"
    doc = _run(race_workload(tmp_path, _two(steady, steady)), tmp_path / "s.db")
    for c in doc["candidates"]:
        # past the minimum of 5 (a second process each), well before the maximum of 15
        assert 5 < c["latency_ms"]["rounds"] < 15
        assert c["latency_ms"]["processes"] == 2
        assert "every comparison decided" in c["stopped"] or "every CI" in c["stopped"]
        assert c["validity"] == "valid"


def test_rounds_stay_between_the_minimum_and_the_maximum(tmp_path: Path) -> None:
    a, b = "{ latency_ms = 1.0, jitter = 0.3 }", "{ latency_ms = 1.02, jitter = 0.3 }"
    doc = _run(race_workload(tmp_path, _two(a, b)), tmp_path / "s.db")
    rounds = [c["latency_ms"]["rounds"] for c in doc["candidates"]]
    assert all(5 <= r <= 15 for r in rounds)


def test_unknown_candidate_option_fails_that_candidate_only(tmp_path: Path) -> None:
    doc = _run(
        race_workload(tmp_path, _two("{ latency_ms = 1.0 }", "{ latency_ms = 1.0, bogus = 3 }")),
        tmp_path / "s.db",
    )
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["b-b1"]["status"] == "failed"
    assert "bogus" in by_id["b-b1"]["reason"]
    assert by_id["b-b1"]["validity"] == "invalid"
    assert by_id["a-b1"]["status"] == "ok"
    assert doc["verdicts"][0]["winner"] == "a-b1"


def test_unknown_method_is_unavailable_with_the_offered_methods(tmp_path: Path) -> None:
    cands = """
    [[candidates]]
    label = "ok"
    runtime = "fake"

    [[candidates]]
    label = "weird"
    runtime = "fake"
    precision = "int8"
    method = "static"
    """
    doc = _run(race_workload(tmp_path, cands), tmp_path / "s.db")
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["weird-b1"]["status"] == "unavailable"
    assert "static" in by_id["weird-b1"]["reason"]


def test_duplicate_labels_are_a_spec_error(tmp_path: Path) -> None:
    from bakeoff.errors import UserError
    from bakeoff.loader import load_workload

    path = race_workload(tmp_path, _two("{}", "{}").replace('label = "b"', 'label = "a"'))
    with pytest.raises(UserError, match="unique"):
        load_workload(str(path))


def test_validity_gates() -> None:
    c = Candidate(Variant("fake", "fp32"), 1)
    c.set_status("ok")
    rng = np.random.default_rng(0)
    c.rounds_ns = [list(1_000_000 + rng.integers(0, 10_000, 20)) for _ in range(10)]
    c.block_ns = [sum(r) for r in c.rounds_ns]
    set_validity(c, min_rounds=10, objective="latency")
    assert c.validity == "valid"
    # every other round twice as slow: the spread between rounds is far over 10%
    c.rounds_ns = [[v * (1 + i % 2) for v in r] for i, r in enumerate(c.rounds_ns)]
    set_validity(c, min_rounds=10, objective="latency")
    assert c.validity == "noisy" and "spread" in c.validity_reason
    set_validity(c, min_rounds=20, objective="latency")
    assert c.validity == "invalid" and "rounds" in c.validity_reason
    c.set_status("rejected", "quality gate: too far off")
    set_validity(c, min_rounds=1, objective="latency")
    assert c.validity == "invalid" and "quality" in c.validity_reason


def _measure_trials(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT candidate_id, round FROM trials WHERE kind = 'measure'"
        ).fetchall()


def _polled_trials(db: Path) -> list[tuple[str, int]]:
    """Trials so far; none while the run has created the file but not yet its tables."""
    try:
        return _measure_trials(db)
    except sqlite3.OperationalError:
        return []


def _polled_status(db: Path, candidate_id: str) -> str | None:
    try:
        with sqlite3.connect(db) as conn:
            row = conn.execute(
                "SELECT status FROM candidates WHERE candidate_id = ?", (candidate_id,)
            ).fetchone()
    except sqlite3.OperationalError:  # the run has not created its tables yet
        return None
    return row[0] if row else None


def _cut_stored_rounds_by_one_call(db: Path) -> dict[str, int]:
    """Make the stored rounds look as if the killed run's warm-up had chosen one call
    fewer per round than a new process's warm-up will: with a real runtime the two
    always differ, while the fake's seeded timings would give the same count."""
    kept = {}
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT candidate_id, MIN(calls) FROM trials WHERE kind = 'measure' "
            "GROUP BY candidate_id"
        ).fetchall()
        for cid, calls in rows:
            kept[cid] = calls - 1
            conn.execute(
                "UPDATE trials SET calls = ?, latency_ns = substr(latency_ns, 1, ?) "
                "WHERE candidate_id = ? AND kind = 'measure'",
                (calls - 1, 8 * (calls - 1), cid),
            )
            (doc,) = conn.execute(
                "SELECT document FROM candidates WHERE candidate_id = ?", (cid,)
            ).fetchone()
            doc = json.loads(doc)
            assert doc["settings"]["calls_per_round"] == calls  # what the resume reads
            doc["settings"]["calls_per_round"] = calls - 1
            conn.execute(
                "UPDATE candidates SET document = ? WHERE candidate_id = ?",
                (json.dumps(doc), cid),
            )
    return kept


def test_killed_orchestrator_resumes_without_measuring_a_trial_twice(tmp_path: Path) -> None:
    # 15 calls per round (0.3 s of virtual 20 ms calls), each sleeping 10 ms for real
    slow = "{ latency_ms = 20.0, jitter = 0.05, wall_ms = 10 }"
    # and one 3x slower, raced out after the minimum rounds, before the kill
    cands = (
        _two(slow, slow)
        + """
    [[candidates]]
    label = "late"
    runtime = "fake"
    options = { latency_ms = 60.0, jitter = 0.05, wall_ms = 10 }
    """
    )
    path = race_workload(tmp_path, cands, extra="batch_sizes = [1, 2]".replace("\n", ""))
    text = path.read_text().replace("batch_sizes = [1]\n", "")
    path.write_text(text)
    store = tmp_path / "store" / "bakeoff.db"
    scratch = tmp_path / "scratch"  # the run's temp folders, to see none is left
    scratch.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bakeoff.cli",
            "run",
            str(path),
            "--quick",
            "--store",
            str(store),
            "--budget",
            "60",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            time.sleep(0.1)
            if store.exists() and _polled_status(store, "late-b1") == "ok":
                break
        else:
            pytest.fail("the run never raced late-b1 out")
        os.kill(proc.pid, signal.SIGKILL)  # the orchestrator only; workers see EOF
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _measure_trials(store)
    with sqlite3.connect(store) as conn:
        ((run_id, status),) = conn.execute("SELECT run_id, status FROM runs").fetchall()
        slots_before = dict(
            conn.execute(
                "SELECT candidate_id, MAX(process) FROM trials WHERE kind = 'measure' "
                "GROUP BY candidate_id"
            ).fetchall()
        )
    assert status == "running"  # killed: nobody got to mark it
    # The workers, left alone, exit and remove their private compile caches.
    deadline = time.time() + 30
    while list(scratch.iterdir()) and time.time() < deadline:
        time.sleep(0.1)
    assert not list(scratch.iterdir())
    stored_calls = _cut_stored_rounds_by_one_call(store)

    out = tmp_path / "resumed.json"
    result = api.resume(run_id, store, json_path=out)
    after = _measure_trials(store)
    # The resumed rounds keep the call count of the rounds stored before the kill.
    with sqlite3.connect(store) as conn:
        for cid, calls in stored_calls.items():
            counts = conn.execute(
                "SELECT DISTINCT calls FROM trials WHERE candidate_id = ? AND kind = 'measure'",
                (cid,),
            ).fetchall()
            assert counts == [(calls,)], (cid, counts)
    assert len(after) == len(set(after)), "a trial was measured twice"
    assert set(before) < set(after)  # the resumed run finished what was left
    # The resumed run's workers are new processes: their rounds never share a
    # process slot with the rounds measured before the kill.
    with sqlite3.connect(store) as conn:
        resumed = conn.execute(
            "SELECT candidate_id, round, process FROM trials WHERE kind = 'measure'"
        ).fetchall()
    for cid, r, process in resumed:
        if cid in slots_before and (cid, r) not in before:
            assert process > slots_before[cid], (cid, r, process, slots_before)
    doc = json.loads(out.read_text())
    assert doc["run_id"] == run_id
    assert sorted(c["id"] for c in doc["candidates"]) == [
        "a-b1",
        "a-b2",
        "b-b1",
        "b-b2",
        "late-b1",
        "late-b2",
    ]
    assert all(c["status"] == "ok" for c in doc["candidates"])
    # Raced out before the kill: kept as it was, and judged with its group.
    late = next(c for c in doc["candidates"] if c["id"] == "late-b1")
    assert {r for cid, r in after if cid == "late-b1"} == {
        r for cid, r in before if cid == "late-b1"
    }
    assert late["stopped"].startswith("raced out early, after 3 rounds"), late["stopped"]
    assert (late["validity"], late["validity_reason"]) == ("valid", "")
    # Machine use during the rounds covers the rounds the resumed run measured.
    new = set(after) - set(before)
    for g in doc["noise"]["during"]:
        rounds = {r for cid, r in new if cid.endswith(f"-b{g['batch_size']}")}
        assert g["rounds"] == len(rounds), (g, sorted(rounds))
    assert result.exit_code == 0
    with pytest.raises(Exception, match="already finished"):
        api.resume(run_id, store)


def _as_from_a_terminal() -> None:
    """In the child before exec: SIGINT at its default and unblocked, as a shell
    starts a job. An ignored or blocked SIGINT survives exec, and the pytest worker
    that starts the run has hosted in-process runs of many libraries; once (one
    fresh-clone make test out of many, not reproduced since) the run ignored SIGINT
    and finished as if never interrupted, while SIGTERM still stopped it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _slow_run_measuring(tmp_path: Path, store: Path, **popen: Any) -> subprocess.Popen[str]:
    """`bakeoff run` of two slow fake candidates in a process of its own, once it has
    measured a round. A CI target no run reaches makes it last all its rounds
    (several seconds), so on a loaded machine it is still running afterwards."""
    slow = "{ latency_ms = 20.0, jitter = 0.05, wall_ms = 10 }"
    path = race_workload(tmp_path, _two(slow, slow), extra="ci_target = 0.001")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bakeoff.cli", "run", str(path), "--quick", "--store", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
        **popen,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (store.exists() and _polled_trials(store)):
        time.sleep(0.1)
    return proc


@pytest.mark.parametrize(
    ("signum", "code", "group"),
    [
        (signal.SIGINT, 130, False),
        # Ctrl-C in a terminal: SIGINT reaches the workers as well
        (signal.SIGINT, 130, True),
        (signal.SIGTERM, 143, False),
    ],
)
def test_ctrl_c_or_sigterm_marks_the_run_interrupted_and_says_how_to_resume(
    tmp_path: Path, signum: int, code: int, group: bool
) -> None:
    store = tmp_path / "store" / "bakeoff.db"
    # its own process group, as a terminal's job has
    proc = _slow_run_measuring(tmp_path, store, start_new_session=group)
    try:
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    with sqlite3.connect(store) as conn:
        ((run_id, status),) = conn.execute("SELECT run_id, status FROM runs").fetchall()
    assert status == "interrupted", err  # what the run said, should it ever finish instead
    assert proc.returncode == code
    said = " ".join(err.split())
    resume = f"bakeoff run --resume {run_id} --store {store}"
    assert f"run {run_id}; if it is interrupted, `{resume}`" in said  # before any work
    assert f"interrupted: what finished is in the store; `{resume}` finishes the run" in said
    # The orchestrator stops its workers; none fails or dies of the signal itself.
    with sqlite3.connect(store) as conn:
        assert {s for (s,) in conn.execute("SELECT status FROM candidates")} == {"pending"}
    for log in (store.parent / "runs" / run_id / "logs").glob("*.log"):
        assert "KeyboardInterrupt" not in log.read_text(), log.name
    # `bakeoff show` says the same, and what is not finished
    from typer.testing import CliRunner

    from bakeoff.cli import app

    shown = CliRunner().invoke(app, ["show", run_id, "--store", str(store)])
    assert shown.exit_code == 0, shown.output
    assert f"run {run_id} is interrupted; `{resume}` finishes it" in " ".join(shown.output.split())
    assert "a-b1: not finished" in shown.output


def test_a_run_still_running_elsewhere_cannot_be_resumed(tmp_path: Path) -> None:
    store = tmp_path / "store" / "bakeoff.db"
    proc = _slow_run_measuring(tmp_path, store)
    try:
        with sqlite3.connect(store) as conn:
            ((run_id,),) = conn.execute("SELECT run_id FROM runs").fetchall()
        from bakeoff.errors import UserError

        with pytest.raises(UserError, match=f"run {run_id} is being run right now by process"):
            api.resume(run_id, store)
        assert proc.poll() is None  # the running one goes on, its status untouched
        with sqlite3.connect(store) as conn:
            assert conn.execute("SELECT status FROM runs").fetchone() == ("running",)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)  # reads its stderr, so a full pipe cannot block it
    finally:
        if proc.poll() is None:
            proc.kill()
    # stopped, its lock went with it: the run can be finished now
    assert api.resume(run_id, store).exit_code == 0


def test_server_scenario_finds_a_passing_rate_with_loadgen(tmp_path: Path) -> None:
    cands = _two("{ latency_ms = 1.0, wall_ms = 1 }", "{ latency_ms = 3.0, wall_ms = 3 }")
    opts = api.RunOptions(
        quick=True, store=tmp_path / "s.db", scenario="server", latency_bound_ms=50.0
    )
    doc = api.run(str(race_workload(tmp_path, cands)), opts).document
    by_id = {c["id"]: c for c in doc["candidates"]}
    srv = by_id["a-b1"]["server"]
    assert srv["scenario"] == "server" and srv["bound_ms"] == 50.0
    assert srv["max_qps"] is not None and srv["max_qps"] > 0
    assert srv["p99_ms_at_max"] <= 50.0
    assert len(srv["tries"]) == 5
    # a wall-clock 1 ms call cannot serve much more than 1000 queries/s
    assert srv["max_qps"] < 1100
    assert by_id["b-b1"]["server"] is None  # raced out before the scenario
    assert doc["settings"]["scenario"] == "server"


def test_server_scenario_needs_a_positive_bound(tmp_path: Path) -> None:
    from bakeoff.errors import UserError

    opts = api.RunOptions(store=tmp_path / "s.db", scenario="server", latency_bound_ms=0)
    with pytest.raises(UserError, match="bound"):
        api.run(str(race_workload(tmp_path, _two("{}", "{}"))), opts)


def test_cold_start_repeated_in_fresh_processes_has_a_ci(tmp_path: Path) -> None:
    cands = _two("{ latency_ms = 1.0 }", "{ latency_ms = 1.0 }")
    opts = api.RunOptions(quick=True, store=tmp_path / "s.db", cold_starts=3)
    doc = api.run(str(race_workload(tmp_path, cands)), opts).document
    for c in doc["candidates"]:
        cold = c["cold_start_s"]
        assert cold["repeats"] == 3
        assert len(cold["load_samples"]) == 3 and all(x > 0 for x in cold["load_samples"])
        lo, hi = cold["load_ci95"]
        assert lo <= cold["load"] <= hi
        # each fresh process times its imports apart, as part of its load
        imports, loads = cold["import_samples"], cold["load_samples"]
        assert all(0 <= i <= x for i, x in zip(imports, loads, strict=True))
    assert doc["timing_s"]["measure_cold_start"] > 0
    # Loaded side by side (more than one core), the measuring workers' loads are no
    # cold starts measured alone: all three figures come from fresh processes.
    logs = RunFolder.of(tmp_path / "s.db", doc["run_id"]).logs
    for c in doc["candidates"]:
        fresh = sorted(p.name for p in logs.glob(f"{c['id']}-cold*.log"))
        alone = c["worker"]["loaded_alone"]
        assert fresh == [f"{c['id']}-cold{n}.log" for n in ((2, 3) if alone else (1, 2, 3))]
    console = Console(record=True, width=200)
    print_result(doc, console)
    shown = console.export_text()
    assert "Cold start (mean of 3 fresh processes, 95% CI)" in shown
    a = doc["candidates"][0]["cold_start_s"]
    lo, hi = a["load_ci95"]
    ilo, ihi = a["import_ci95"]
    assert (
        f"a-b1: load {num(a['load'])} s [{num(lo)}-{num(hi)}] "
        f"(imports {num(a['import'])} s [{num(ilo)}-{num(ihi)}])"
    ) in shown
    assert "of the load time (never in latency): imports fake " in shown


def test_close_contenders_get_a_second_process_before_any_decision(tmp_path: Path) -> None:
    same = "{ latency_ms = 2.0, jitter = 0.05 }"
    doc = _run(race_workload(tmp_path, _two(same, same)), tmp_path / "s.db")
    for c in doc["candidates"]:
        assert c["latency_ms"]["processes"] == 2
        assert c["latency_ms"]["rounds"] > 5
    with sqlite3.connect(tmp_path / "s.db") as conn:
        slots = {p for (p,) in conn.execute("SELECT DISTINCT process FROM trials")}
    assert slots == {0, 1}


def test_a_large_gap_is_raced_on_one_process_each(tmp_path: Path) -> None:
    doc = _run(
        race_workload(tmp_path, _two("{ latency_ms = 1.0 }", "{ latency_ms = 2.0 }")),
        tmp_path / "s.db",
    )
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["b-b1"]["stopped"].startswith("raced out after 5 rounds")
    assert by_id["a-b1"]["latency_ms"]["processes"] == 1


def _constrained(tmp_path: Path, constraints: str) -> api.RunResult:
    cands = _two(
        "{ latency_ms = 1.0, model_mb = 50 }",  # a: fast, but a big model
        "{ latency_ms = 1.5, model_mb = 5 }",  # b: slower, small
    )
    path = race_workload(tmp_path, cands)
    path.write_text(path.read_text() + f"\n[constraints]\n{constraints}\n")
    return api.run(str(path), api.RunOptions(quick=True, store=tmp_path / "s.db"))


def test_constraints_make_the_fastest_ineligible_and_say_why(tmp_path: Path) -> None:
    result = _constrained(tmp_path, "max_model_size_mb = 10")
    doc = result.document
    [v] = doc["verdicts"]
    assert v["winner"] == "b-b1" and v["ranking"] == ["b-b1"]
    why = "model size 50 MB > max_model_size_mb = 10"
    assert v["excluded_by_constraints"] == {"a-b1": why}
    assert f"Not eligible, beyond the constraints: a-b1: {why}." in v["reason"]
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["a-b1"]["status"] == "ok"  # measured fine; only not eligible
    assert by_id["a-b1"]["constraint_violations"] == [why]
    assert by_id["b-b1"]["constraint_violations"] == []
    assert doc["workload"]["constraints"] == {"max_model_size_mb": 10}
    assert result.exit_code == 0
    console = Console(record=True, width=200)
    print_result(doc, console)
    shown = console.export_text()
    assert f"beyond the workload's constraints (not eligible)\n  a-b1: {why}" in shown


def test_no_candidate_within_the_constraints_is_no_winner(tmp_path: Path) -> None:
    result = _constrained(tmp_path, "max_model_size_mb = 10\nmax_p99_ms = 1.2")
    [v] = result.document["verdicts"]
    assert v["winner"] is None and result.exit_code == 1
    assert v["headline"] == "No candidate meets the constraints."
    assert v["reason"].startswith("Batch 1 (latency): No candidate meets the constraints.")
    b = v["excluded_by_constraints"]["b-b1"]
    assert b.startswith("p99 1.") and "ms > max_p99_ms = 1.2" in b


def test_constraint_keys_are_checked() -> None:
    from bakeoff.errors import UserError
    from bakeoff.workload import parse_spec

    base = 'name = "x"\n[model]\nkind = "fake"\n[data]\npath = "d.npz"\n[constraints]\n'
    with pytest.raises(UserError, match="max_p99"):
        parse_spec(base + "max_p99 = 20\n", "w.toml")
    with pytest.raises(UserError, match="max_peak_memory_mb"):
        parse_spec(base + "max_peak_memory_mb = -1\n", "w.toml")


def test_a_candidate_beyond_the_constraints_neither_leads_nor_races_others_out(
    tmp_path: Path,
) -> None:
    # a is the fastest by far but too big: were it the leader, it would race b
    # and c out after the minimum rounds and leave their close call undecided.
    cands = _two("{ latency_ms = 1.0, model_mb = 50 }", "{ latency_ms = 2.0, model_mb = 5 }")
    cands += '\n[[candidates]]\nlabel = "c"\nruntime = "fake"\n'
    cands += "options = { latency_ms = 2.0, model_mb = 5, seed = 7 }\n"
    path = race_workload(tmp_path, cands, extra="")
    path.write_text(path.read_text() + "\n[constraints]\nmax_model_size_mb = 10\n")
    doc = _run(path, tmp_path / "s.db")
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["a-b1"]["stopped"] == (
        "stopped after 5 rounds: beyond the constraints "
        "(model size 50 MB > max_model_size_mb = 10), so it cannot win"
    )
    assert by_id["a-b1"]["status"] == "ok" and by_id["a-b1"]["validity"] == "valid"
    for cid in ("b-b1", "c-b1"):
        assert not by_id[cid]["stopped"].startswith("raced out"), by_id[cid]["stopped"]
        assert by_id[cid]["latency_ms"]["processes"] == 2  # the close call got its second look
    [v] = doc["verdicts"]
    assert v["winner"] in ("b-b1", "c-b1") and set(v["excluded_by_constraints"]) == {"a-b1"}
    assert sorted(v["ties"][0]) == ["b-b1", "c-b1"], v["reason"]


def _spread_out(
    rng: np.random.Generator, label: str, ms: float, rounds: int, calls: int, spread: float = 0.01
) -> Candidate:
    """A measured candidate whose samples spread evenly over ms +- spread, shuffled into rounds."""
    c = Candidate(Variant("fake", "fp32"), 1, label)
    c.model_bytes = 2**20
    flat = rng.permutation(np.linspace(ms * (1 - spread), ms * (1 + spread), rounds * calls))
    for lat in (flat * 1e6).astype(np.int64).reshape(rounds, calls).tolist():
        c.rounds_ns.append(lat)
        c.block_ns.append(int(sum(lat)))
        c.round_slots.append(0)
    return c


def test_racing_corrects_for_every_candidate_the_verdict_will() -> None:
    from bakeoff.inference.options import trial_settings
    from bakeoff.trials.racing import check_stop

    rng = np.random.default_rng(0)
    a, b = _spread_out(rng, "a", 1.0, 5, 50), _spread_out(rng, "b", 1.5, 5, 50)
    s = trial_settings(api.RunOptions(quick=True), threads=1, n_groups=1)
    # Two left in the race, but three entered it (one raced out earlier): the
    # verdict ranks all three and corrects for two comparisons, and so must racing.
    out, _, _ = check_stop([a, b], s, multi_process=False, compared=3)
    assert out["b-b1"].startswith("raced out after 5 rounds: a-b1 is 1.50x faster (97.5% CI")
    out, _, _ = check_stop([a, b], s, multi_process=False)
    assert "(95.0% CI" in out["b-b1"]


def test_a_candidate_raced_out_after_another_left_is_not_tied_in_the_verdict(
    tmp_path: Path,
) -> None:
    # slow, 3x behind, leaves early (after 3 rounds); b, 14% behind a but noisy,
    # only after the minimum 5. The verdict corrects for all three, so racing must too.
    cands = _two("{ latency_ms = 1.0, jitter = 0.02 }", "{ latency_ms = 1.14, jitter = 0.6 }")
    cands += '\n[[candidates]]\nlabel = "slow"\nruntime = "fake"\n'
    cands += "options = { latency_ms = 3.0, jitter = 0.02 }\n"
    doc = _run(race_workload(tmp_path, cands), tmp_path / "s.db")
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert by_id["slow-b1"]["stopped"].startswith("raced out early, after 3 rounds")
    b = by_id["b-b1"]
    assert b["stopped"].startswith("raced out after") and b["latency_ms"]["rounds"] > 5
    assert "(97.5% CI" in b["stopped"], b["stopped"]
    [v] = doc["verdicts"]
    assert v["winner"] == "a-b1" and v["ties"] == [], v["reason"]


def test_constraint_standing_is_sure_only_beyond_the_ci_and_with_enough_samples() -> None:
    from bakeoff.trials.racing import constraint_standing

    rng = np.random.default_rng(0)

    def cand(label: str, ms: float, rounds: int, calls: int, spread: float = 0.01) -> Candidate:
        return _spread_out(rng, label, ms, rounds, calls, spread)

    far = cand("far", 2.0, 10, 50)  # 500 samples, p50 and p99 well above 1.5 ms
    near = cand("near", 1.003, 10, 50, 0.2)  # p50 just above 1.0 ms, its CI reaching below
    few = cand("few", 2.0, 2, 5)  # 10 samples: too few for a p99 to rule anything out
    beyond, maybe = constraint_standing([far, near, few], {"max_p99_ms": 1.5})
    assert set(beyond) == {"far-b1"} and beyond["far-b1"].startswith("p99 2")
    assert maybe == {"few-b1"}
    beyond, maybe = constraint_standing([far, near], {"max_p50_ms": 1.0})
    assert set(beyond) == {"far-b1"} and maybe == {"near-b1"}
    # Peak memory is known only when a worker exits: never judged mid-run.
    assert constraint_standing([far], {"max_peak_memory_mb": 1}) == ({}, set())
    assert constraint_standing([far], {"max_model_size_mb": 0.5})[0] == {
        "far-b1": "model size 1 MB > max_model_size_mb = 0.5"
    }


def test_constraint_and_ci_target_flags_replace_the_workloads_and_survive_a_resume(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from bakeoff.cli import app

    cands = _two("{ latency_ms = 1.0, model_mb = 50 }", "{ latency_ms = 1.5, model_mb = 5 }")
    path = race_workload(tmp_path, cands)
    # The file's limit would exclude nothing; the flag's excludes a.
    path.write_text(path.read_text() + "\n[constraints]\nmax_model_size_mb = 100\n")
    store = tmp_path / "s.db"
    out = tmp_path / "r.json"
    args = ["run", str(path), "--quick", "--store", str(store), "--json", str(out)]
    flags = ["--max-model-size-mb", "10", "--ci-target", "0.3"]
    result = CliRunner().invoke(app, [*args, *flags])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["workload"]["constraints"] == {"max_model_size_mb": 10}
    assert doc["settings"]["ci_target"] == 0.3
    assert doc["verdicts"][0]["winner"] == "b-b1"
    assert doc["settings"]["explicit_constraints"] == {"max_model_size_mb": 10}
    # A resumed run keeps the limits its flags set. Killed after its last group
    # was measured, it measures nothing again (an empty group once crashed it).
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE runs SET status = 'interrupted'")
        (trials,) = conn.execute("SELECT COUNT(*) FROM trials").fetchone()
    resumed = api.resume(doc["run_id"], store).document
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT COUNT(*) FROM trials").fetchone() == (trials,)
    assert resumed["workload"]["constraints"] == {"max_model_size_mb": 10}
    assert resumed["verdicts"][0]["excluded_by_constraints"].keys() == {"a-b1"}
    assert resumed["settings"]["ci_target"] == 0.3


def test_a_resume_is_refused_when_what_the_rounds_were_measured_with_changed(
    tmp_path: Path,
) -> None:
    from bakeoff.errors import UserError

    path = race_workload(tmp_path, _two("{ latency_ms = 1.0 }", "{ latency_ms = 1.5 }"))
    original = path.read_text()
    store = tmp_path / "s.db"
    run_id = _run(path, store)["run_id"]

    def interrupted() -> None:
        with sqlite3.connect(store) as conn:
            conn.execute("UPDATE runs SET status = 'interrupted'")

    def refused(match: str) -> None:
        with pytest.raises(UserError, match=match):
            api.resume(run_id, store)
        with sqlite3.connect(store) as conn:  # refused: the run stays resumable
            assert conn.execute("SELECT status FROM runs").fetchone() == ("interrupted",)

    interrupted()
    path.write_text(original + '\n[[candidates]]\nlabel = "c"\nruntime = "fake"\n')
    refused(r"other candidates than when run .* started \(new: c-b1\); put it back")
    path.write_text(original)
    data = dict(np.load(tmp_path / "d.npz"))
    np.savez(tmp_path / "d.npz", input=data["input"] + 1.0)
    refused(r"the workload's data changed since run .* started; put it back")
    np.savez(tmp_path / "d.npz", **data)
    path.write_text(original + "\n[quality]\nmax_drop = 0.5\n")
    refused(r"quality gate changed .* \(then cosine max_drop 0.01, now cosine max_drop 0.5\)")
    path.write_text(original.replace("options = {}", "options = { latency_ms = 9.0 }", 1))
    refused(r"the model changed since run")
    path.write_text(original)
    with sqlite3.connect(store) as conn:
        (env,) = conn.execute("SELECT environment FROM runs").fetchone()
        env = json.loads(env)
        env["packages"]["numpy"] = "1.0.0"
        conn.execute("UPDATE runs SET environment = ?", (json.dumps(env),))
    refused(r"installed libraries changed since run .* \(numpy 1\.0\.0 -> " + np.__version__)
    with sqlite3.connect(store) as conn:
        env["packages"]["numpy"] = np.__version__
        conn.execute("UPDATE runs SET environment = ?", (json.dumps(env),))
    # everything as it was: the run finishes
    assert api.resume(run_id, store).exit_code == 0


def test_the_budget_is_respected_within_ten_percent(tmp_path: Path) -> None:
    # Identical but very noisy, and a CI target no run reaches: no comparison can
    # be decided, so only the budget stops the rounds (calls take real wall time
    # here, 1 ms each).
    same = "{ latency_ms = 2.0, jitter = 0.5, wall_ms = 1 }"
    path = race_workload(tmp_path, _two(same, same), extra="ci_target = 0.001")
    budget = 10.0  # the minimum 8 rounds take about 4 s of it
    opts = api.RunOptions(store=tmp_path / "s.db", budget_s=budget)
    doc = api.run(str(path), opts).document
    stopped = {c["stopped"] for c in doc["candidates"]}
    assert all("budget of 10 s was spent" in s for s in stopped), stopped
    assert doc["timing_s"]["measure_rounds"] <= 1.1 * budget
    assert min(c["latency_ms"]["rounds"] for c in doc["candidates"]) >= 8  # the minimum ran


def test_ci_target_flag_replaces_the_workloads_and_stops_sooner(tmp_path: Path) -> None:
    noisy = "{ latency_ms = 1.0, jitter = 0.3 }"
    path = race_workload(tmp_path, _two(noisy, noisy))
    default = _run(path, tmp_path / "a.db")
    loose = _run(path, tmp_path / "b.db", ci_target=0.3)
    assert default["settings"]["ci_target"] == 0.02 and loose["settings"]["ci_target"] == 0.3
    for c in loose["candidates"]:
        assert c["stopped"].startswith("stopped: every CI within +-30% after"), c["stopped"]
    assert not any("+-30%" in c["stopped"] for c in default["candidates"])


def test_a_variant_another_made_unnecessary_is_left_out_not_a_row_and_stays_out_on_resume(
    tmp_path: Path,
) -> None:
    from bakeoff.report.data import load
    from bakeoff.report.html import render
    from bakeoff.report.markdown import render as render_md

    why = "fake-fp32 already does what it would"
    path = race_workload(tmp_path, "", f'{{ not_needed = {{ int8 = "{why}" }} }}')
    grid = 'precisions = ["fp32", "int8"]\nbatch_sizes = [1, 4]'
    path.write_text(path.read_text().replace("batch_sizes = [1]", grid))
    store = tmp_path / "s.db"
    doc = _run(path, store)
    assert [c["id"] for c in doc["candidates"]] == ["fake-fp32-b1", "fake-fp32-b4"]
    assert doc["settings"]["left_out"] == {"fake-int8": f"not needed: {why}"}
    assert not [c for c in doc["candidates"] if c["status"] == "unavailable"]
    console = Console(record=True, width=200)
    print_result(doc, console)
    shown = console.export_text()
    assert f"fake-int8: not needed: {why}" in shown
    stored = load(doc["run_id"], store)
    assert f"<code>fake-int8</code>, not needed: {_html_escape(why)}" in render(stored)
    assert f"`fake-int8`: not needed: {why}" in render_md(stored)
    # The stored run knows too: a resume enumerates the same candidates, not the row.
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE runs SET status = 'interrupted'")
        (left_out,) = conn.execute("SELECT settings FROM runs").fetchone()
    assert json.loads(left_out)["left_out"] == {"fake-int8": f"not needed: {why}"}
    resumed = api.resume(doc["run_id"], store).document
    assert [c["id"] for c in resumed["candidates"]] == ["fake-fp32-b1", "fake-fp32-b4"]
    assert resumed["settings"]["left_out"] == {"fake-int8": f"not needed: {why}"}
    # A hand-written candidate is built as asked, needed or not.
    (tmp_path / "asked").mkdir()
    asked = race_workload(
        tmp_path / "asked",
        '[[candidates]]\nlabel = "q"\nruntime = "fake"\nprecision = "int8"\n',
        f'{{ not_needed = {{ int8 = "{why}" }} }}',
    )
    [c] = _run(asked, tmp_path / "s2.db")["candidates"]
    assert (c["id"], c["status"]) == ("q-b1", "ok"), c["reason"]


def _html_escape(text: str) -> str:
    import html

    return html.escape(text)


def test_gross_losers_needs_the_rounds_the_gap_and_no_constraints() -> None:
    import dataclasses

    from bakeoff.inference.options import trial_settings
    from bakeoff.trials.racing import EARLY_ROUNDS, GROSS_GAP, gross_losers

    rng = np.random.default_rng(0)
    s = trial_settings(api.RunOptions(quick=True), threads=1, n_groups=1)

    def field(rounds: int, slow_ms: float) -> list[Candidate]:
        return [
            _spread_out(rng, "lead", 1.0, rounds, 20),
            _spread_out(rng, "mid", 1.1, rounds, 20),
            _spread_out(rng, "slow", slow_ms, rounds, 20),
        ]

    out = gross_losers(field(EARLY_ROUNDS, 2.0), s, frozenset(), compared=3)
    assert list(out) == ["slow-b1"] and out["slow-b1"].startswith("raced out early, after 3")
    assert gross_losers(field(EARLY_ROUNDS - 1, 2.0), s, frozenset(), 3) == {}
    assert gross_losers(field(EARLY_ROUNDS, GROSS_GAP * 0.9), s, frozenset(), 3) == {}
    assert gross_losers(field(EARLY_ROUNDS, 2.0), s, frozenset({"slow-b1"}), 3) == {}
    limited = dataclasses.replace(s, constraints={"max_p99_ms": 5.0})
    assert gross_losers(field(EARLY_ROUNDS, 2.0), limited, frozenset(), 3) == {}
