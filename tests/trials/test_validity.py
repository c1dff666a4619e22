"""Noise during a run (docs/method.md rule 10): CPU that other processes take while candidates
are measured is recorded per batch size and, past a gate, flags the results."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from bakeoff import api, environment
from bakeoff.backends import Variant
from bakeoff.candidates import Candidate
from bakeoff.trials.validity import BUSY_GATE_CORES, machine_use, set_validity

_BUSY_LOOP = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"


def _sample(wall: float, busy: float, ours: dict[int, float], steal: float = 0.0):
    return environment.CpuSample(wall, busy, steal, ours)


def test_other_cpu_is_the_machines_busy_time_less_bakeoffs_own() -> None:
    a = _sample(0.0, 100.0, {1: 5.0, 2: 10.0})
    # 2 s: the machine was busy 3 CPU-seconds, bakeoff's processes 2 of them (and
    # pid 3 started in between), 0.2 s of it stolen by the hypervisor.
    b = _sample(2.0, 103.0, {1: 5.5, 2: 11.0, 3: 0.5}, steal=0.2)
    assert environment.other_cpu(a, b) == {"seconds": 2.0, "other_cores": 0.5, "steal_cores": 0.1}
    # A child that exited in between is counted as other: the figure errs to "busy".
    gone = _sample(2.0, 103.0, {1: 5.5})
    assert environment.other_cpu(a, gone)["other_cores"] == 1.25


def _cpu_s(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _until_it_has_run(pid: int, cpu_s: float) -> None:
    """Waits (without asserting how long) until `pid` has had `cpu_s` of CPU: on a
    shared machine a busy loop gets whatever the others leave it."""
    while _cpu_s(pid) < cpu_s:
        time.sleep(0.05)


def test_a_busy_process_outside_bakeoff_is_seen_and_a_child_is_not(tmp_path: Path) -> None:
    """What the busy loops got is measured beside the samples, never assumed: the
    test holds however much of the machine they were given."""
    pid_file = tmp_path / "pid"
    # A busy loop that is not our descendant (its shell parent exits at once).
    subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -c "{_BUSY_LOOP}" & echo $! > {pid_file}'],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    foreign = int(pid_file.read_text())
    try:
        _until_it_has_run(foreign, 0.05)
        start, foreign_start = environment.cpu_sample(), _cpu_s(foreign)
        _until_it_has_run(foreign, foreign_start + 0.5)
        end, foreign_end = environment.cpu_sample(), _cpu_s(foreign)
    finally:
        os.kill(foreign, signal.SIGKILL)
    assert foreign not in end.ours_s  # not bakeoff's
    use = environment.other_cpu(start, end)
    other_s = use["other_cores"] * use["seconds"]
    # Everything the foreign loop ran in the window is in "other" (less the kernel's
    # tick granularity and the rounding of the figures).
    assert other_s >= (foreign_end - foreign_start) - 0.1, (use, foreign_end - foreign_start)

    child = subprocess.Popen([sys.executable, "-c", _BUSY_LOOP])
    try:
        _until_it_has_run(child.pid, 0.05)
        start = environment.cpu_sample()
        _until_it_has_run(child.pid, start.ours_s[child.pid] + 0.5)
        end = environment.cpu_sample()
    finally:
        child.kill()
        child.wait()
    # A child is bakeoff's own: its CPU is counted as ours, all of it. The loop above
    # waited for 0.5 s of it; psutil's figures are clock ticks held in floats, so
    # 0.58 - 0.08 can read 0.49999999999999994 (the flake CI once hit).
    assert round(end.ours_s[child.pid] - start.ours_s[child.pid], 6) >= 0.5


def test_the_gate_counts_only_cores_the_measurement_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    rounds = [
        {"seconds": 1.0, "other_cores": 0.2, "steal_cores": 0.0},
        {"seconds": 3.0, "other_cores": 0.6, "steal_cores": 0.1},
    ]
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 4 if logical else 2)
    use = machine_use(rounds, threads=2)
    assert use is not None
    assert use["other_cores_mean"] == 0.5 and use["other_cores_max"] == 0.6
    assert use["steal_cores_mean"] == 0.075
    # 2 cores (4 hyperthreads), both measured: the gate is the allowance alone.
    assert use["gate_cores"] == BUSY_GATE_CORES and use["busy"]
    # 32 cores, 2 measured: half a core of others is no interference.
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 64 if logical else 32)
    assert machine_use(rounds, threads=2)["gate_cores"] == 30.25  # type: ignore[index]
    assert not machine_use(rounds, threads=2)["busy"]  # type: ignore[index]
    assert machine_use([], threads=2) is None


def test_machine_use_names_the_cause_of_a_noisy_result() -> None:
    rng = np.random.default_rng(0)
    busy = {"other_cores_mean": 0.8, "gate_cores": 0.25, "busy": True}
    quiet = {"other_cores_mean": 0.01, "gate_cores": 0.25, "busy": False}

    def validity(machine: dict | None, virtual: bool = False, spread: bool = False) -> tuple:
        c = Candidate(Variant("fake", "fp32"), 1)
        c.set_status("ok")
        c.settings = {"virtual_clock": True} if virtual else {}
        c.rounds_ns = [list(1_000_000 + rng.integers(0, 10_000, 20)) for _ in range(10)]
        if spread:  # every other round twice as slow
            c.rounds_ns = [[v * (1 + i % 2) for v in r] for i, r in enumerate(c.rounds_ns)]
        c.block_ns = [sum(r) for r in c.rounds_ns]
        set_validity(c, min_rounds=10, objective="latency", machine=machine)
        return c.validity, c.validity_reason

    assert validity(busy) == (
        "noisy",
        "other processes used 0.80 cores on average meanwhile (gate 0.25): the machine was "
        "not quiet, even though the rounds agree",
    )
    assert validity(busy, virtual=True) == ("valid", "")  # no neighbour moves a virtual clock
    assert validity(quiet) == ("valid", "")
    v, why = validity(quiet, spread=True)
    assert v == "noisy" and why.endswith(
        "other processes used 0.01 cores on average meanwhile (gate 0.25), so the spread is "
        "the runtime's own"
    )
    v, why = validity(busy, spread=True)
    assert v == "noisy" and why.endswith("0.80 cores on average meanwhile, over the gate of 0.25")
    v, why = validity(None, spread=True)  # nothing known of the machine
    assert why.endswith("the machine was busy or the runtime unstable")


def test_a_spread_every_candidate_shares_is_blamed_on_the_machine() -> None:
    quiet = {"other_cores_mean": 0.01, "gate_cores": 0.25, "busy": False}
    rng = np.random.default_rng(0)

    def candidate(base: int, slow_rounds: tuple[int, ...]) -> Candidate:
        c = Candidate(Variant("fake", "fp32"), 1)
        c.set_status("ok")
        c.rounds_ns = [
            (base * (1.3 if r in slow_rounds else 1.0) + rng.integers(0, base // 100, 20))
            .astype(int)
            .tolist()
            for r in range(10)
        ]
        c.block_ns = [int(sum(r)) for r in c.rounds_ns]
        return c

    # rounds 1, 3, 5 and 7 were 30% slower for all three: the machine drifted
    together = [candidate(base, (1, 3, 5, 7)) for base in (1_000_000, 2_000_000, 500_000)]
    c = together[0]
    set_validity(c, min_rounds=10, objective="latency", machine=quiet, others=together)
    assert c.validity == "noisy"
    assert "the other candidates' rounds moved with it" in c.validity_reason
    assert "so the spread is the machine's" in c.validity_reason
    assert "other processes used 0.01 cores" in c.validity_reason
    # the same candidate among others whose rounds held steady: its own spread
    steady = [candidate(base, ()) for base in (2_000_000, 500_000)]
    set_validity(c, min_rounds=10, objective="latency", machine=quiet, others=[c, *steady])
    assert c.validity == "noisy"
    assert "the other candidates' rounds did not move with it" in c.validity_reason
    assert c.validity_reason.endswith("so the spread is the runtime's own")


def test_a_run_records_machine_use_per_batch_size(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", input=rng.random((64, 8), dtype=np.float32))
    (tmp_path / "w.toml").write_text(
        textwrap.dedent(
            """
            name = "noise"
            [model]
            kind = "fake"
            [data]
            path = "d.npz"
            [search]
            runtimes = ["fake"]
            batch_sizes = [1, 4]
            """
        )
    )
    opts = api.RunOptions(quick=True, store=tmp_path / "s.db")
    doc = api.run(str(tmp_path / "w.toml"), opts).document
    during = doc["noise"]["during"]
    assert [g["batch_size"] for g in during] == [1, 4]
    for g in during:
        assert g["rounds"] >= 5 and g["seconds"] > 0
        assert g["other_cores_mean"] >= 0 and g["other_cores_max"] >= g["other_cores_mean"]
        assert isinstance(g["busy"], bool)
    # The fake runtime's virtual clock is immune, so its results stay valid either way.
    assert {c["validity"] for c in doc["candidates"] if c["status"] == "ok"} == {"valid"}


def test_a_verdict_measured_on_a_busy_machine_says_so() -> None:
    from bakeoff.inference.groups import busy_caveat

    busy = {"other_cores_mean": 0.8, "gate_cores": 0.25, "busy": True}
    real = Candidate(Variant("onnxruntime", "fp32"), 32)
    real.set_status("ok")
    fake = Candidate(Variant("fake", "fp32"), 32)
    fake.set_status("ok")
    fake.settings = {"virtual_clock": True}
    assert busy_caveat(busy, [real, fake]) == (
        "Other processes used 0.80 cores on average while batch size 32 was measured "
        "(gate 0.25), so these figures are marked noisy: measure again on a quiet machine."
    )
    assert busy_caveat({**busy, "busy": False}, [real]) is None
    assert busy_caveat(None, [real]) is None
    assert busy_caveat(busy, [fake]) is None  # a virtual clock no neighbour can move
    real.set_status("failed", "crashed")
    assert busy_caveat(busy, [real]) is None  # nothing measured, nothing to caveat
