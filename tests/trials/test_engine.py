"""The trial engine on its own: it sees typed jobs, a Gate, a Launcher, settings
and an event sink, and nothing of the inference pipeline. Real worker processes
of the fake runtime (virtual clock), with a gate and a launcher written here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.backends import Variant, any_batch_size
from bakeoff.candidates import Candidate, not_isolated
from bakeoff.inference.messages import JobBase, LoadJob, LoadSpec
from bakeoff.inference.shared_workers import SharedWorkers, build_key
from bakeoff.source import ModelSource
from bakeoff.trials.engine import Checked, Engine, run_trials
from bakeoff.trials.entrant import Entrant
from bakeoff.trials.jobs import Job, Peak
from bakeoff.trials.launcher import LocalLauncher, Worker, WorkerFailed, WorkerProcess
from bakeoff.trials.settings import TrialSettings


def _jobs(tmp_path: Path, candidates: list[Candidate]) -> dict[str, LoadJob]:
    data = tmp_path / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(
        data,
        **{"quality/input": rng.random((8, 4), np.float32)},
        **{"pool/input": rng.random((32, 4), np.float32)},
    )
    base = JobBase(
        source=ModelSource("fake", None, None, None),
        data_path=str(data),
        input_names=("input",),
        artifacts_dir=str(tmp_path / "artifacts"),
    )
    return {
        c.id: LoadJob(
            base=base,
            load=LoadSpec(c.variant, {}, c.batch_size, 1, c.options, c.id),
            outputs_path=str(tmp_path / f"{c.id}.npy"),
        )
        for c in candidates
    }


@dataclass
class RejectOneGate:
    """Not a quality check: passes every worker whose outputs exist, except one
    candidate's; counts what it was asked."""

    reject: str
    asked: list[tuple[str, bool]] = field(default_factory=list)

    def check(self, entrant: Candidate, job: LoadJob, record: bool) -> Checked:
        self.asked.append((entrant.id, record))
        assert Path(job.outputs_path).exists()  # the worker saved its first outputs
        if entrant.id == self.reject:
            return Checked(False, "not wanted here")
        return Checked(True, "wanted")


class CountingLauncher(LocalLauncher):
    """Local processes, counted: a cluster launcher would stand here."""

    def __init__(self, logs: Path) -> None:
        super().__init__(logs)
        self.started: list[str] = []

    def start(self, job: Job, name: str) -> Worker:
        self.started.append(name)
        return super().start(job, name)


@dataclass
class Recorder:
    notes: list[str] = field(default_factory=list)
    timed_rounds: list[tuple[str, int, str]] = field(default_factory=list)

    def note(self, message: str, entrant: Entrant | None) -> None:
        self.notes.append(message)

    def timed(
        self,
        entrant: Entrant,
        round_index: int,
        kind: str,
        latency_ns: list[int],
        block_ns: int | None,
        slot: int,
        extra: dict[str, list[int]] | None = None,
    ) -> None:
        self.timed_rounds.append((entrant.id, round_index, kind))


def _settings(**changes: Any) -> TrialSettings:
    base: dict[str, Any] = {
        "threads": 1,
        "trial_timeout_s": 60.0,
        "warmup_s": 0.0,
        "warmup_calls": 2,
        "slice_s": 0.01,
        "settle_s": 0.0,
        "min_rounds": 3,
        "max_rounds": 4,
        "budget_s": 60.0,
        "seed": 0,
        "racing": False,
    }
    return TrialSettings(**{**base, **changes})


def test_the_engine_runs_candidates_through_any_gate_launcher_and_hooks(tmp_path: Path) -> None:
    fast = Candidate(Variant("fake", "fp32"), 1, "fast", {"latency_ms": 1.0})
    slow = Candidate(Variant("fake", "fp32"), 1, "slow", {"latency_ms": 2.0})
    unwanted = Candidate(Variant("fake", "fp32"), 1, "unwanted", {"latency_ms": 0.5})
    entrants = [fast, slow, unwanted]
    gate = RejectOneGate(reject="unwanted-b1")
    launcher = CountingLauncher(tmp_path / "logs")
    events = Recorder()
    after: list[str] = []

    def hook(entrant: Candidate, worker: Worker) -> bool:
        after.append(entrant.id)
        return True

    outcome = run_trials(
        entrants,
        _jobs(tmp_path, entrants),
        Engine(gate, launcher, _settings(), events, [hook]),
    )
    assert launcher.started == ["fast-b1", "slow-b1", "unwanted-b1"]
    assert gate.asked == [("fast-b1", True), ("slow-b1", True), ("unwanted-b1", True)]
    assert unwanted.status == "rejected" and unwanted.reason == "not wanted here"
    assert not unwanted.rounds_ns and unwanted.validity == "invalid"
    for c in (fast, slow):
        assert c.status == "ok" and len(c.rounds_ns) == 4, c.reason
        assert c.validity == "valid" and c.peak_rss_mb is not None
        assert c.stopped == "stopped: the maximum of 4 rounds"
        assert c.settings["virtual_clock"] and c.settings["calls_per_round"] >= 1
    # The virtual clock: 1 ms and 2 ms a call.
    assert np.median(fast.samples()) < np.median(slow.samples())
    assert after == ["fast-b1", "slow-b1"]  # the hook ran on those still in the race
    measured = [t for t in events.timed_rounds if t[2] == "measure"]
    assert sorted(measured) == sorted(
        (c, r, "measure") for c in ("fast-b1", "slow-b1") for r in range(4)
    )
    assert any(n.startswith("loaded fast-b1") and n.endswith("wanted") for n in events.notes)
    assert set(outcome.phases) == {"load_and_quality", "warmup", "rounds"}


def test_calls_per_round_are_whole_multiples_when_asked(tmp_path: Path) -> None:
    """A generative workload asks for whole passes over its prompts in every round."""
    fast = Candidate(Variant("fake", "fp32"), 1, "fast", {"latency_ms": 1.0})
    slow = Candidate(Variant("fake", "fp32"), 1, "slow", {"latency_ms": 3.0})
    entrants = [fast, slow]
    run_trials(
        entrants,
        _jobs(tmp_path, entrants),
        Engine(
            RejectOneGate(reject="none"),
            CountingLauncher(tmp_path / "logs"),
            _settings(calls_multiple=7),
            Recorder(),
        ),
    )
    for c in entrants:
        calls = c.settings["calls_per_round"]
        assert calls % 7 == 0 and all(len(r) == calls for r in c.rounds_ns)
    # 10 ms at 1 ms a call is 10 calls, rounded up to 14; at 3 ms, 4 calls up to 7
    assert (fast.settings["calls_per_round"], slow.settings["calls_per_round"]) == (14, 7)


def test_racing_starts_further_processes_through_the_gate_without_recording(
    tmp_path: Path,
) -> None:
    """Close contenders get a second process each; the gate is asked again, but what
    it finds is not the candidate's (record=False). A clearly slower one is raced out."""
    a = Candidate(Variant("fake", "fp32"), 1, "a", {"latency_ms": 1.0})
    b = Candidate(Variant("fake", "fp32"), 1, "b", {"latency_ms": 1.0})
    slow = Candidate(Variant("fake", "fp32"), 1, "slow", {"latency_ms": 3.0})
    entrants = [a, b, slow]
    gate = RejectOneGate(reject="none")
    launcher = CountingLauncher(tmp_path / "logs")
    run_trials(
        entrants,
        _jobs(tmp_path, entrants),
        Engine(gate, launcher, _settings(racing=True, max_rounds=12), Recorder()),
    )
    assert slow.stopped.startswith("raced out after 3 rounds"), slow.stopped
    assert launcher.started.count("a-b1") >= 2 and launcher.started.count("b-b1") >= 2
    assert ("a-b1", False) in gate.asked and ("b-b1", False) in gate.asked
    assert len(set(a.round_slots)) >= 2  # its rounds came from more than one process
    assert a.status == b.status == "ok"


class CacheMarkingLauncher(LocalLauncher):
    """Marks each candidate's first worker's compile cache, and notes what each
    further process's own cache held when it started."""

    def __init__(self, logs: Path) -> None:
        super().__init__(logs)
        self.seeded: dict[str, list[bool]] = {}

    def start(self, job: Job, name: str) -> WorkerProcess:
        worker = super().start(job, name)
        assert worker.compile_cache is not None  # a measuring job gets caches of its own
        marker = worker.compile_cache / "kernel.so"
        if isinstance(job, LoadJob) and job.reuse_compiles:
            self.seeded.setdefault(name, []).append(marker.exists())
        else:
            assert not any(worker.compile_cache.iterdir())  # a first worker starts empty
            marker.write_text(name)
        return worker


def test_further_processes_start_side_by_side_from_the_first_workers_kernels(
    tmp_path: Path,
) -> None:
    """A close call's further processes are no cold starts: they load side by side
    when the group's first workers did, and start from a copy of their candidate's
    first worker's compile caches (torch.compile does not compile again); a first
    worker always starts from empty ones."""
    a = Candidate(Variant("fake", "fp32"), 1, "a", {"latency_ms": 1.0})
    b = Candidate(Variant("fake", "fp32"), 1, "b", {"latency_ms": 1.0})
    entrants = [a, b]
    launcher = CacheMarkingLauncher(tmp_path / "logs")
    events = Recorder()
    settings = _settings(racing=True, max_rounds=12, load_side_by_side=2)
    run_trials(
        entrants,
        _jobs(tmp_path, entrants),
        Engine(RejectOneGate(reject="none"), launcher, settings, events),
    )
    assert launcher.seeded["a-b1"] and all(launcher.seeded["a-b1"])
    assert launcher.seeded["b-b1"] and all(launcher.seeded["b-b1"])
    assert a.status == b.status == "ok" and len(set(a.round_slots)) >= 2
    assert any("starting a second process" in n for n in events.notes)


def test_after_race_runs_on_raced_out_candidates_too_then_every_worker_exits(
    tmp_path: Path,
) -> None:
    """A measurement the race does not decide (a generative run's concurrency sweep)
    sees every candidate that passed the gate, the raced-out one's worker kept idle
    for it; a worker the hook loses leaves its candidate ok on its rounds."""
    a = Candidate(Variant("fake", "fp32"), 1, "a", {"latency_ms": 1.0})
    b = Candidate(Variant("fake", "fp32"), 1, "b", {"latency_ms": 1.0})
    slow = Candidate(Variant("fake", "fp32"), 1, "slow", {"latency_ms": 3.0})
    unwanted = Candidate(Variant("fake", "fp32"), 1, "unwanted", {"latency_ms": 0.5})
    entrants = [a, b, slow, unwanted]
    seen: list[tuple[str, bool]] = []

    def sweep(lanes: Sequence[tuple[Candidate, Worker]]) -> set[str]:
        for c, worker in lanes:
            seen.append((c.id, c.status == "pending"))
            worker.request(Peak(), 60.0)  # the worker is alive and answers
        return {"b-b1"}

    run_trials(
        entrants,
        _jobs(tmp_path, entrants),
        Engine(
            RejectOneGate(reject="unwanted-b1"),
            CountingLauncher(tmp_path / "logs"),
            _settings(racing=True, max_rounds=6),
            Recorder(),
            after_race=sweep,
        ),
    )
    assert slow.stopped.startswith("raced out after 3 rounds"), slow.stopped
    assert sorted(cid for cid, _ in seen) == ["a-b1", "b-b1", "slow-b1"]  # not the rejected
    assert all(pending for _, pending in seen)  # none had exited before it
    assert a.status == slow.status == b.status == "ok"
    assert a.peak_rss_mb is not None and slow.peak_rss_mb is not None
    assert b.peak_rss_mb is None  # its worker was lost in the hook: no exit to report it
    assert unwanted.status == "rejected"


def _two_groups(
    tmp_path: Path, gate: RejectOneGate, sizes: tuple[int, int] = (1, 4)
) -> tuple[Candidate, Candidate, CountingLauncher]:
    """One fake variant timed at two batch sizes, group after group, through
    SharedWorkers as a run measures them."""
    small, large = (
        Candidate(Variant("fake", "fp32"), bs, options={"per_sample_ms": 1.0}) for bs in sizes
    )
    jobs = _jobs(tmp_path, [small, large])
    launcher = CountingLauncher(tmp_path / "logs")
    shared = SharedWorkers(launcher, {build_key(jobs[small.id]): list(sizes)})
    try:
        for c in (small, large):
            run_trials([c], {c.id: jobs[c.id]}, Engine(gate, shared, _settings(), Recorder()))
    finally:
        shared.close()
    return small, large, launcher


def test_one_worker_times_a_build_at_each_batch_size(tmp_path: Path) -> None:
    gate = RejectOneGate(reject="none")
    small, large, launcher = _two_groups(tmp_path, gate)
    assert launcher.started == ["fake-fp32-b1"]  # one process for both
    assert small.status == large.status == "ok"
    # Quality once, at the largest batch size; the gate judged both candidates on
    # those outputs (copied where the second one's go).
    assert small.worker["quality_batch_size"] == large.worker["quality_batch_size"] == 4
    assert gate.asked == [("fake-fp32-b1", True), ("fake-fp32-b4", True)]
    assert (small.worker["first_call"], large.worker["first_call"]) == (
        "cold",
        "after batch size 1",
    )
    assert small.worker["batch_sizes"] == large.worker["batch_sizes"] == [1, 4]
    assert large.load_s == small.load_s  # one load
    # At 4 its first call is the one this process made at that shape, in the quality
    # pass (where a runtime that compiles per shape compiles), not a later warm one.
    assert large.first_call_s == small.worker["first_call_at_quality_batch_size_s"]
    assert large.first_call_s is not None and large.first_call_s > 0
    assert small.peak_rss_mb is not None and large.peak_rss_mb is not None
    # Two warm-up calls each; at 4, the first call there, made just before, was the
    # first of them (docs/method.md rule 4).
    assert (len(small.warmup_ns), len(large.warmup_ns)) == (2, 1)
    # Timed at its own batch: 1 ms + 1 ms a sample on the virtual clock.
    assert 1.5e6 < np.median(small.samples()) < 2.5e6
    assert 4.5e6 < np.median(large.samples()) < 5.5e6


def test_a_rejected_worker_is_not_kept_for_the_next_batch_size(tmp_path: Path) -> None:
    gate = RejectOneGate(reject="fake-fp32-b1")
    small, large, launcher = _two_groups(tmp_path, gate)
    assert small.status == "rejected"
    assert launcher.started == ["fake-fp32-b1", "fake-fp32-b4"]  # a fresh one for 4
    assert large.status == "ok" and large.worker["first_call"] == "cold"
    assert len(large.warmup_ns) == 2  # a fresh process: every warm-up call its own


def test_loads_side_by_side_start_the_slowest_first_and_say_so(tmp_path: Path) -> None:
    entrants = [Candidate(Variant("fake", "fp32"), 1, name, {"latency_ms": 1.0}) for name in "abc"]
    launcher = CountingLauncher(tmp_path / "logs")
    settings = _settings(load_side_by_side=2)
    engine = Engine(
        RejectOneGate(reject="b-b1"), launcher, settings, Recorder(), load_first=frozenset({"c-b1"})
    )
    run_trials(entrants, _jobs(tmp_path, entrants), engine)
    assert launcher.started[0] == "c-b1" and sorted(launcher.started) == ["a-b1", "b-b1", "c-b1"]
    a, b, c = entrants
    assert a.status == c.status == "ok" and b.status == "rejected"
    assert a.worker["loaded_alone"] is False and c.worker["loaded_alone"] is False
    assert "loaded beside other candidates" in not_isolated(a)


def test_which_runtimes_share_a_worker_across_batch_sizes() -> None:
    # Those that run any batch once loaded; not those that fix the shape at load.
    for runtime in ("fake", "torch", "torch-compile", "onnxruntime", "openvino"):
        assert any_batch_size(runtime), runtime
    for runtime in ("jax", "litert", "tvm", "tensorrt", "tensorflow"):
        assert not any_batch_size(runtime), runtime


class NotNeededLauncher(CountingLauncher):
    """Local processes, but one candidate's worker answers as a build step that its
    own tool found would add nothing (NNCF's AWQ with no layer to scale)."""

    def __init__(self, logs: Path, not_needed: str) -> None:
        super().__init__(logs)
        self.not_needed = not_needed

    def start(self, job: Job, name: str) -> Worker:
        if name == self.not_needed:
            self.started.append(name)
            raise WorkerFailed("AWQ found no layer to scale", not_needed=True)
        return super().start(job, name)


def test_a_worker_whose_build_is_not_needed_makes_its_candidate_unavailable(
    tmp_path: Path,
) -> None:
    kept = Candidate(Variant("fake", "fp32"), 1, "kept", {"latency_ms": 1.0})
    moot = Candidate(Variant("fake", "fp32"), 1, "moot", {"latency_ms": 1.0})
    entrants = [kept, moot]
    run_trials(
        entrants,
        _jobs(tmp_path, entrants),
        Engine(
            RejectOneGate(reject="none"),
            NotNeededLauncher(tmp_path / "logs", "moot-b1"),
            _settings(),
            Recorder(),
        ),
    )
    assert kept.status == "ok", kept.reason
    # unavailable with the tool's own reason, not "failed" with a load error around it
    assert (moot.status, moot.reason) == ("unavailable", "AWQ found no layer to scale")
    assert not moot.rounds_ns
