"""Measuring one batch-size group: load each candidate in its own worker, check its
quality, warm it up, then time all of them in randomized round-robin rounds.

Loads happen one at a time so cold-start figures are not inflated by a
neighbour; during rounds exactly one worker runs while the others sit blocked
on their sockets.

Sampling is adaptive: after the minimum rounds, a candidate that the leader
beats by more than `verdict.CLOSE_CALL` (Bonferroni-corrected CI) is raced
out; closer contenders get more worker processes, since a close call needs
several pairs of processes to agree (`verdict.judge`). The group stops once
every remaining comparison is decided, every CI is tight enough, or the budget
is spent. Rounds already in the store (a resumed
run) are kept and not measured again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bakeoff import environment
from bakeoff.candidates import Candidate, candidate_document
from bakeoff.judge import stats, verdict
from bakeoff.judge.quality import evaluate
from bakeoff.measure.jobs import (
    ColdStartJob,
    Exit,
    JobBase,
    LoadJob,
    LoadSpec,
    Measure,
    Offline,
    Server,
    Warmup,
)
from bakeoff.measure.process import WorkerFailed, WorkerProcess, run_job
from bakeoff.measure.worker import alt_outputs_path


@dataclass(frozen=True)
class MeasureSettings:
    threads: int
    cpus: list[int] | None
    trial_timeout_s: float
    warmup_s: float
    warmup_calls: int
    slice_s: float  # target timed seconds per candidate per round
    settle_s: float  # untimed seconds (at least one call) before each timed block
    min_rounds: int
    max_rounds: int
    budget_s: float  # soft limit on the rounds of this group, checked after min_rounds
    seed: int
    objective: str = "latency"
    margin: float = verdict.DEFAULT_MARGIN
    ci_target: float = 0.02  # stop when every objective CI half-width is this tight
    racing: bool = True
    # latency | server (LoadGen Poisson arrivals, batch 1) | offline (LoadGen,
    # every sample at once, concurrency swept at each batch size)
    scenario: str = "latency"
    server_bound_ms: float = 100.0
    server_duration_s: float = 10.0
    server_steps: int = 6
    offline_duration_s: float = 5.0
    cold_starts: int = 1  # fresh processes per candidate for cold start (1: the measuring one)
    # The workload's [constraints] (key -> limit): a candidate beyond one cannot win,
    # so it neither leads the race nor races on past the minimum rounds.
    constraints: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupContext:
    job_base: JobBase  # source, data_path, input_names, the quality gate
    run_dir: Path
    reference: np.ndarray
    labels: np.ndarray | None
    metric: str
    max_drop: float
    reference_alt: np.ndarray | None = None  # at the second shape (variable axes halved)


Recorder = Callable[[Candidate, int, str, list[int], int | None, int], None]
Notify = Callable[[str, Candidate | None], None]


def _fail(c: Candidate, worker: WorkerProcess | None, reason: str) -> None:
    c.set_status("failed", reason)
    if worker is not None:
        worker.close()


def _threads(c: Candidate, s: MeasureSettings) -> int:
    """Every runtime gets the same threads unless a hand-written candidate says otherwise."""
    return int(c.options.get("threads", s.threads))


def _load_spec(
    c: Candidate, s: MeasureSettings, threads: int | None = None, streams: int = 1
) -> LoadSpec:
    return LoadSpec(
        variant=c.variant,
        artifact=c.artifact,
        batch_size=c.batch_size,
        threads=_threads(c, s) if threads is None else threads,
        options=c.options,
        candidate_id=c.id,
        streams=streams,
    )


def _cpus(s: MeasureSettings) -> tuple[int, ...] | None:
    return tuple(s.cpus) if s.cpus else None


def _load_job(c: Candidate, ctx: GroupContext, s: MeasureSettings) -> LoadJob:
    outputs_path = ctx.run_dir / "outputs" / f"{c.id}.npy"
    outputs_path.parent.mkdir(parents=True, exist_ok=True)
    return LoadJob(
        base=ctx.job_base, load=_load_spec(c, s), outputs_path=str(outputs_path), cpus=_cpus(s)
    )


# What the scheduler adds to a candidate's settings at warm-up (and a resumed run reuses).
MEASURING_SETTINGS = ("calls_per_round", "settle_calls")


def _load(c: Candidate, ctx: GroupContext, s: MeasureSettings) -> WorkerProcess | None:
    job = _load_job(c, ctx, s)
    outputs_path = Path(job.outputs_path)
    worker = None
    try:
        worker = WorkerProcess(job, _threads(c, s), ctx.run_dir / "logs" / f"{c.id}.log")
        ready = worker.reply(s.trial_timeout_s)
    except WorkerFailed as exc:
        _fail(c, worker, f"load or first call failed: {exc}")
        return None
    c.load_s, c.first_call_s = ready["load_s"], ready["first_call_s"]
    # A resumed candidate keeps the call counts its stored rounds were made with:
    # a new process's warm-up gives other counts, and rounds of mixed lengths
    # cannot be compared (or even stacked).
    kept = {k: c.settings[k] for k in MEASURING_SETTINGS if k in c.settings and c.rounds_ns}
    c.settings = {**ready["settings"], **kept}
    c.model_bytes = ready.get("model_bytes")
    try:
        outputs = np.load(outputs_path, allow_pickle=False)
        c.quality = evaluate(ctx.metric, outputs, ctx.reference, ctx.labels, ctx.max_drop)
    except (ValueError, OSError) as exc:
        _fail(c, worker, f"quality check failed: {exc}")
        return None
    if not c.quality.passed:
        c.set_status("rejected", "quality gate: " + c.quality.describe())
        worker.close()
        return None
    if ctx.reference_alt is not None:
        try:
            outputs = np.load(alt_outputs_path(outputs_path), allow_pickle=False)
            c.quality_alt = evaluate(
                ctx.metric, outputs, ctx.reference_alt, ctx.labels, ctx.max_drop
            )
        except (ValueError, OSError) as exc:
            _fail(c, worker, f"quality check at the second shape failed: {exc}")
            return None
        if not c.quality_alt.passed:
            c.set_status(
                "rejected",
                "quality gate at the second shape (variable axes halved): "
                + c.quality_alt.describe(),
            )
            worker.close()
            return None
    return worker


def _measured(c: Candidate, rounds: int) -> verdict.Measured:
    return verdict.Measured(
        c.id,
        c.samples()[:rounds],
        np.asarray(c.block_ns[:rounds]),
        c.batch_size,
        np.asarray(c.round_slots[:rounds], dtype=np.int64),
    )


def _relative_half_width(m: verdict.Measured, objective: str) -> float:
    if objective == "latency":
        iv = stats.latency_percentiles(m.samples_ns)["p50"]
    else:
        iv = stats.throughput(m.calls, m.block_ns, m.batch_size)
    return (iv.hi - iv.lo) / 2.0 / iv.value if iv.value > 0 else float("inf")


def _constraint_standing(
    active: list[Candidate], constraints: dict[str, float]
) -> tuple[dict[str, str], set[str]]:
    """Which candidates are surely beyond a constraint (id -> which), and which may be.

    Sure: the figure is beyond the limit with its CI too, and has the samples it
    needs (model size and cold start are known from the load). Maybe: the point
    estimate is beyond but the CI reaches back. Peak memory is known only when a
    worker exits, so it is checked in the verdict alone.
    """
    limits = {k: v for k, v in constraints.items() if k != "max_peak_memory_mb"}
    beyond: dict[str, str] = {}
    maybe: set[str] = set()
    if not limits:
        return beyond, maybe
    for c in active:
        found = [b for b in verdict.breaches(candidate_document(c), limits) if b.measured]
        sure = [b.words for b in found if b.certain]
        if sure:
            beyond[c.id] = "; ".join(sure)
        elif found:
            maybe.add(c.id)
    return beyond, maybe


def _check_stop(
    active: list[Candidate],
    s: MeasureSettings,
    multi_process: bool,
    beyond: dict[str, str] | None = None,
    may_be_beyond: frozenset[str] | set[str] = frozenset(),
    room: frozenset[str] | set[str] = frozenset(),
    compared: int = 0,
) -> tuple[dict[str, str], str | None, set[str]]:
    """Which candidates to stop (id -> why), whether the group is done (why), and
    which candidates need another process to settle a close call.

    Racing drops a candidate only when the leader is ahead by more than
    `verdict.CLOSE_CALL` with the CI: a smaller gap seen between two single
    processes is no proof (see `verdict.judge`), so such contenders get a
    second process each (`multi_process` says they all have) before anything
    is decided, and a close call that looks decided gets a third. `room` are
    the candidates whose processes may still add evidence: one is yet to run
    its rounds, or one more may start.

    `beyond` candidates break a constraint for sure: they are stopped now, since
    they cannot win. `may_be_beyond` ones race on but cannot lead: a leader that
    the verdict will exclude must not race eligible candidates out.

    `compared` is how many candidates of the group entered the rounds: the
    verdict corrects for all of them, raced-out ones included, so racing does
    too, or a candidate raced out on a looser CI would come out tied.
    """
    rounds = min(len(c.rounds_ns) for c in active)
    out = {
        cid: f"stopped after {rounds} rounds: beyond the constraints ({why}), so it cannot win"
        for cid, why in (beyond or {}).items()
    }
    ms = {c.id: _measured(c, rounds) for c in active if c.id not in out}
    if not ms:
        return out, f"no candidate within the constraints after {rounds} rounds", set()
    contenders = [m for m in ms.values() if m.id not in may_be_beyond]
    if not contenders:
        return out, None, set()  # only candidates near a limit: more rounds may bring one within
    leader = max(contenders, key=lambda m: verdict.score(m, s.objective))
    level = verdict.comparison_level(max(len(ms), compared))
    undecided = 0
    raced = 0
    wants: set[str] = set()
    for m in ms.values():
        if m.id == leader.id:
            continue
        judged = verdict.judge(m, leader, s.objective, level, s.margin)
        iv = judged.ratio
        if iv.lo > 1.0 + max(s.margin, verdict.CLOSE_CALL):
            raced += 1
            out[m.id] = (
                f"raced out after {rounds} rounds: {leader.id} is {iv.value:.2f}x faster "
                f"({level:.1%} CI {iv.lo:.2f}-{iv.hi:.2f})"
            )
        elif judged.decision not in ("faster", "equivalent"):
            undecided += 1
            if judged.needs_processes:
                wants |= {m.id, leader.id}
    if len(ms) - raced <= 1:
        gone = "raced out or beyond the constraints" if beyond else "raced out"
        return out, f"every other candidate {gone} after {rounds} rounds", set()
    if not multi_process:
        return out, None, set()  # close contenders: decide only with a second process each
    if undecided == 0:
        return out, f"every comparison decided after {rounds} rounds", set()
    grow = wants & set(room)
    if grow:  # a close call that more processes may settle: no stopping on tight CIs yet
        return out, None, grow
    if all(_relative_half_width(m, s.objective) <= s.ci_target for m in ms.values()):
        return out, f"every CI within +-{s.ci_target:.0%} after {rounds} rounds", set()
    return out, None, set()


def _exit(c: Candidate, processes: list[tuple[int, WorkerProcess]], s: MeasureSettings) -> None:
    peaks = []
    for _, worker in processes:
        try:
            peaks.append(worker.request(Exit(), s.trial_timeout_s)["peak_rss_mb"])
        except WorkerFailed as exc:
            _fail(c, None, f"failed while exiting: {exc}")
            return
        finally:
            worker.close()
    c.peak_rss_mb = max(peaks)
    c.set_status("ok")


@dataclass
class Processes:
    """The worker processes of one candidate, which take turns round by round.

    Each has a slot number stored with its rounds, unique within the candidate
    (a resumed run's fresh workers get new ones), so the statistics can tell
    processes apart. The newest process runs first, then the rest in order.
    """

    running: list[tuple[int, WorkerProcess]]
    tried: int = 1  # processes started or attempted; a failed start is not retried
    turns_from: int = 0  # the round the current rotation began

    @property
    def first(self) -> WorkerProcess:
        """The worker loaded before the rounds: warm-up and the scenarios use it."""
        return self.running[0][1]

    def close(self) -> None:
        for _, w in self.running:
            w.close()

    def settled(self, slots: list[int]) -> bool:
        """Whether each process has run the rounds a process pair needs to count."""
        return all(slots.count(slot) >= verdict.MIN_PAIR_ROUNDS for slot, _ in self.running)

    def turn(self, r: int) -> tuple[int, WorkerProcess]:
        n = len(self.running)
        return self.running[(r - self.turns_from - 1) % n] if n > 1 else self.running[0]


def _another_process(
    c: Candidate,
    ctx: GroupContext,
    s: MeasureSettings,
    procs: Processes,
    next_round: int,
    notify: Notify,
) -> str:
    """Start one more worker for a close contender; it too must pass the quality gate.

    Returns why it could not, or "" if it started.
    """
    nth = {2: "second", 3: "third"}.get(procs.tried + 1, f"process {procs.tried + 1}")
    notify(f"{c.id}: still close after {next_round} rounds, starting a {nth} process", c)
    probe = Candidate(c.variant, c.batch_size, c.label, c.options, artifact=c.artifact)
    w = _load(probe, ctx, s)
    reason = probe.reason
    if w is not None:
        try:
            w.request(Warmup(seconds=s.warmup_s, min_calls=s.warmup_calls), s.trial_timeout_s)
        except WorkerFailed as exc:
            w.close()
            w, reason = None, str(exc)
    if w is None:
        procs.tried = verdict.CLOSE_CALL_PROCESSES  # a start that failed is not retried
        n = len(procs.running)
        why = f"no {nth} process ({reason}); its CI covers {n} process{'es' if n > 1 else ''}"
        notify(f"{c.id}: {why}", c)
        return why
    procs.tried += 1
    slot = max(slot for slot, _ in procs.running) + 1
    procs.running.append((slot, w))
    procs.turns_from = next_round
    return ""


def _server(
    c: Candidate,
    procs: dict[str, Processes],
    ctx: GroupContext,
    s: MeasureSettings,
    notify: Notify,
) -> None:
    """The server scenario for a candidate still in the race (raced-out ones lost)."""
    notify(
        f"{c.id}: server scenario, searching the highest rate with p99 <= {s.server_bound_ms:g} ms",
        c,
    )
    single = float(np.median(c.samples())) / 1e9
    budget = s.trial_timeout_s + s.server_steps * (3 * s.server_duration_s + 10)
    try:
        reply = procs[c.id].first.request(
            Server(
                single_stream_s=single,
                bound_ms=s.server_bound_ms,
                duration_s=s.server_duration_s,
                min_queries=64,
                steps=s.server_steps,
                out_dir=str(ctx.run_dir / "loadgen" / c.id),
                seed=s.seed,
            ),
            budget,
        )
    except WorkerFailed as exc:
        # The latency rounds stand; only the scenario is lost, and says why.
        c.server = {"scenario": "server", "error": str(exc)}
        procs.pop(c.id).close()
        c.set_status("ok")
        return
    c.server = reply["server"]
    notify(f"{c.id}: server peak {c.server['max_qps']} queries/s", c)


def concurrency_levels(threads: int) -> list[int]:
    """1, 2, 4, ... streams, each with threads // streams threads: the machine's
    threads are shared out, never oversubscribed."""
    levels = [1]
    while levels[-1] * 2 <= threads:
        levels.append(levels[-1] * 2)
    return levels


def _offline(
    c: Candidate,
    procs: dict[str, Processes],
    ctx: GroupContext,
    s: MeasureSettings,
    notify: Notify,
) -> None:
    """The offline scenario for a candidate still in the race, concurrency swept.

    One stream runs in the candidate's measuring worker; more streams get a
    fresh worker each, loaded with the threads shared out between its streams
    and its quality checked again (a differently configured runtime is a
    different build of the same variant).
    """
    total_threads = _threads(c, s)
    per_call_s = float(np.median(c.samples())) / 1e9
    sweep: list[dict[str, Any]] = []
    for streams in concurrency_levels(total_threads):
        applied = c.settings
        per_stream = max(1, total_threads // streams)
        notify(f"{c.id}: offline scenario, {streams} stream(s) x {per_stream} thread(s)", c)
        measured = [t["samples_per_s"] for t in sweep if t.get("samples_per_s")]
        cmd = Offline(
            concurrency=streams,
            # LoadGen issues expected rate x duration samples, so a guess far above
            # the real rate runs for far longer than duration_s. More streams seldom
            # scale linearly (shared cores, the GIL around small calls), so after the
            # first step the guess is the best rate measured so far, not streams x it.
            expected_sps=max(measured) if measured else c.batch_size / max(per_call_s, 1e-6),
            duration_s=s.offline_duration_s,
            out_dir=str(ctx.run_dir / "loadgen" / f"{c.id}-offline-{streams}"),
            seed=s.seed,
        )
        budget = s.trial_timeout_s + 4 * s.offline_duration_s + 10
        worker: WorkerProcess | None = None
        try:
            if streams == 1:
                reply = procs[c.id].first.request(cmd, budget)
            else:
                job = LoadJob(
                    base=ctx.job_base,
                    load=_load_spec(c, s, threads=per_stream, streams=streams),
                    outputs_path=str(ctx.run_dir / "outputs" / f"{c.id}-x{streams}.npy"),
                    cpus=_cpus(s),
                )
                worker = WorkerProcess(
                    job, per_stream, ctx.run_dir / "logs" / f"{c.id}-offline-{streams}.log"
                )
                applied = worker.reply(s.trial_timeout_s)["settings"]
                outputs = np.load(job.outputs_path, allow_pickle=False)
                quality = evaluate(ctx.metric, outputs, ctx.reference, ctx.labels, ctx.max_drop)
                if not quality.passed:
                    raise WorkerFailed(f"quality gate with {streams} streams: {quality.describe()}")
                reply = worker.request(cmd, budget)
        except WorkerFailed as exc:
            sweep.append(
                {"concurrency": streams, "threads_per_stream": per_stream, "error": str(exc)}
            )
            if streams == 1:
                procs.pop(c.id).close()
                c.set_status("ok")  # the latency rounds stand; only the scenario is lost
                break
            continue
        finally:
            if worker is not None:
                worker.close()
        sweep.append({**reply["offline"], "threads_per_stream": per_stream, "settings": applied})
    ok = [t for t in sweep if t.get("samples_per_s")]
    best = max(ok, key=lambda t: t["samples_per_s"]) if ok else None
    c.offline = {
        "scenario": "offline",
        "batch_size": c.batch_size,
        "sweep": sweep,
        "best": best,
        "generator": "mlperf_loadgen (offline: every sample issued at once)",
    }
    if best:
        notify(
            f"{c.id}: offline peak {best['samples_per_s']:.1f} samples/s "
            f"with {best['concurrency']} stream(s)",
            c,
        )


def set_validity(
    c: Candidate,
    min_rounds: int,
    objective: str,
    machine: dict[str, Any] | None = None,
    others: list[Candidate] | None = None,
) -> None:
    """valid | noisy | invalid, with the reason (docs/method.md §3 rule 10).

    `machine` is what other processes used during the rounds (`machine_use`):
    over its gate the results are noisy. Under it, a wide spread that `others`
    (the rest of the group, measured in the same rounds) shared is the
    machine's drift, and one they did not share is the runtime's own. A
    runtime on a virtual clock (the fake one) is immune to all of it.
    """
    if c.status != "ok":
        c.validity, c.validity_reason = "invalid", f"{c.status}: {c.reason}"
        return
    rounds = len(c.rounds_ns)
    if rounds < min_rounds:
        c.validity = "invalid"
        c.validity_reason = f"only {rounds} rounds, fewer than the minimum {min_rounds}"
        return
    if c.settings.get("virtual_clock"):
        machine, others = None, None
    others_use = (
        f"other processes used {machine['other_cores_mean']:.2f} cores on average meanwhile"
        if machine
        else ""
    )
    cv = stats.round_to_round_cv(c.samples(), np.asarray(c.block_ns), objective)
    if cv > verdict.NOISY_CV:
        c.validity = "noisy"
        spread = (
            f"round-to-round spread of the {objective} is {cv:.0%} (gate {verdict.NOISY_CV:.0%})"
        )
        drift = _shared_drift(c, others or [], objective)
        if machine and machine["busy"]:
            cause = f"{others_use}, over the gate of {machine['gate_cores']:.2f}"
        elif drift is not None and drift.own_cv <= verdict.NOISY_CV:
            cause = (
                f"the other candidates' rounds moved with it (the machine's speed drifted "
                f"{drift.machine_cv:.0%} between rounds"
                + (f"; {others_use}" if others_use else "")
                + f"; its own spread is {drift.own_cv:.0%}), so the spread is the machine's: "
                "its absolute figures are uncertain, while comparisons, paired within "
                "rounds, cancel most of it"
            )
        elif not machine:
            cause = "the machine was busy or the runtime unstable"
        else:
            unshared = (
                ""
                if drift is None
                else f" and the other candidates' rounds did not move with it (its own "
                f"spread is {drift.own_cv:.0%})"
            )
            cause = (
                f"{others_use} (gate {machine['gate_cores']:.2f}),{unshared} so the spread is "
                "the runtime's own"
            )
        c.validity_reason = f"{spread}: {cause}"
        return
    if machine and machine["busy"]:
        c.validity = "noisy"
        c.validity_reason = (
            f"{others_use} (gate {machine['gate_cores']:.2f}): the machine was not quiet, "
            "even though the rounds agree"
        )
        return
    c.validity, c.validity_reason = "valid", ""


def _shared_drift(
    c: Candidate, others: list[Candidate], objective: str
) -> stats.SharedDrift | None:
    def rounds_of(x: Candidate) -> np.ndarray:
        return stats.per_round(x.samples(), np.asarray(x.block_ns), objective)

    measured = [o for o in others if o is not c and o.status == "ok" and len(o.rounds_ns) >= 2]
    return stats.shared_drift(rounds_of(c), [rounds_of(o) for o in measured])


def measure_group(
    candidates: list[Candidate],
    ctx: GroupContext,
    s: MeasureSettings,
    record: Recorder,
    notify: Notify,
) -> tuple[dict[str, float], dict[str, Any] | None]:
    """Fill in cold start, quality, samples and peak memory; set each final status.

    Returns the wall time of each phase (loading with quality check, warm-up,
    rounds, cold starts) and what other processes used of the machine during
    the rounds (see `machine_use`).
    """
    phases = {"load_and_quality": 0.0, "warmup": 0.0, "rounds": 0.0, "cold_start": 0.0}
    if not candidates:  # a resumed run whose group had finished before the interruption
        return phases, None
    t_phase = time.perf_counter()
    rounds_cpu: list[dict[str, float]] = []  # what other processes used, round by round
    procs: dict[str, Processes] = {}  # each candidate's workers: close contenders get more
    no_more: dict[str, str] = {}  # why a candidate has fewer processes than it asked for
    calls: dict[str, int] = {}
    settle: dict[str, int] = {}
    try:
        for c in candidates:
            notify(f"loading {c.id}", c)
            w = _load(c, ctx, s)
            if w is not None:
                # A resumed run's worker is a new process: its rounds get a new slot.
                procs[c.id] = Processes([(max(c.round_slots, default=-1) + 1, w)])
            if w is not None and c.quality is not None:
                notify(
                    f"loaded {c.id} in {c.load_s:.1f} s, first call {c.first_call_s:.2f} s; "
                    f"quality {c.quality.metric} {c.quality.value:.4f}",
                    c,
                )
            else:
                notify(f"{c.id}: {c.status}: {c.reason}", c)
        by_id = {c.id: c for c in candidates}
        phases["load_and_quality"] = time.perf_counter() - t_phase
        t_phase = time.perf_counter()
        for cid in list(procs):
            c = by_id[cid]
            notify(f"warming up {cid}", c)
            try:
                reply = procs[cid].first.request(
                    Warmup(seconds=s.warmup_s, min_calls=s.warmup_calls), s.trial_timeout_s
                )
            except WorkerFailed as exc:
                _fail(c, None, f"warm-up failed: {exc}")
                procs.pop(cid).close()
                continue
            c.warmup_ns = reply["latency_ns"]
            record(c, -1, "warmup", c.warmup_ns, None, 0)
            # A fixed call count per round, reused for every round (docs/method.md rule 4); a
            # resumed candidate keeps the count its stored rounds were made with.
            typical = float(np.median(c.warmup_ns[len(c.warmup_ns) // 2 :]))
            if c.rounds_ns and "calls_per_round" in c.settings:
                calls[cid] = int(c.settings["calls_per_round"])
                settle[cid] = int(c.settings.get("settle_calls", 1))
            else:
                per_call = max(typical, 1.0)
                calls[cid] = int(np.clip(np.ceil(s.slice_s * 1e9 / per_call), 1, 10_000_000))
                # Settling matters for short calls only: the switch costs a few ms,
                # noise for a call of hundreds of ms but not worth a call of its own.
                settle[cid] = (
                    int(np.clip(round(s.settle_s * 1e9 / per_call), 1, 1_000))
                    if s.settle_s > 0 and per_call <= 4 * s.settle_s * 1e9
                    else 0
                )
            c.settings = {**c.settings, "calls_per_round": calls[cid], "settle_calls": settle[cid]}
            notify(f"{cid}: {calls[cid]} timed calls per round", c)  # persisted for resume
        phases["warmup"] = time.perf_counter() - t_phase
        entered = set(procs)  # the candidates that go into the rounds
        started = time.perf_counter()
        first = min((len(by_id[cid].rounds_ns) for cid in procs), default=0)
        stop_reason = f"the maximum of {s.max_rounds} rounds"
        for r in range(first, s.max_rounds):
            # The order of round r depends on r alone, so a resumed run continues
            # the same randomized schedule.
            order = sorted(procs)
            np.random.default_rng([s.seed, r]).shuffle(order)
            cpu_at_start, measured_here = environment.cpu_sample(), 0
            for cid in order:
                c = by_id[cid]
                if len(c.rounds_ns) > r:  # measured before an interruption
                    continue
                slot, worker = procs[cid].turn(r)
                try:
                    timed = worker.measure(
                        Measure(calls=calls[cid], settle=settle[cid]), s.trial_timeout_s
                    )
                except WorkerFailed as exc:
                    _fail(c, None, f"failed in round {r + 1}: {exc}")
                    procs.pop(cid).close()
                    continue
                c.rounds_ns.append(timed.latency_ns)
                c.block_ns.append(timed.block_ns)
                c.round_slots.append(slot)
                record(c, r, "measure", timed.latency_ns, timed.block_ns, slot)
                measured_here += 1
            if measured_here:  # a round measured before an interruption is no sample
                rounds_cpu.append(environment.other_cpu(cpu_at_start, environment.cpu_sample()))
            notify(
                f"batch {candidates[0].batch_size}: round {r + 1} done "
                f"({len(procs)} candidates in the race; at least {s.min_rounds} rounds, "
                f"budget {s.budget_s:.0f} s)",
                None,
            )
            if not procs:
                break
            if r + 1 < s.min_rounds:
                continue
            active = [by_id[cid] for cid in procs]
            if s.racing and len(active) >= 2:
                # Decide only once every contender has had its second process
                # (or tried to: one that would not start is not retried).
                multi = all(p.tried >= 2 for p in procs.values())
                room = {
                    cid
                    for cid in procs
                    if procs[cid].tried < verdict.CLOSE_CALL_PROCESSES
                    or not procs[cid].settled(by_id[cid].round_slots)
                }
                beyond, maybe = _constraint_standing(active, s.constraints)
                raced, done, grow = _check_stop(
                    active, s, multi, beyond, maybe, room, compared=len(entered)
                )
                for cid, why in raced.items():
                    by_id[cid].stopped = why
                    _exit(by_id[cid], procs.pop(cid).running, s)
                    notify(f"{cid}: {why}", by_id[cid])
                if done:
                    stop_reason = done
                    break
                for cid in sorted(procs):
                    more = cid in grow and procs[cid].settled(by_id[cid].round_slots)
                    if procs[cid].tried < 2 or (
                        more and procs[cid].tried < verdict.CLOSE_CALL_PROCESSES
                    ):
                        why = _another_process(by_id[cid], ctx, s, procs[cid], r + 1, notify)
                        if why:
                            no_more[cid] = why
            elif s.racing:
                stop_reason = f"nothing left to compare after {r + 1} rounds"
                break
            elapsed = time.perf_counter() - started
            rounds_here = r + 1 - first
            if elapsed + elapsed / max(rounds_here, 1) > s.budget_s:
                stop_reason = f"the budget of {s.budget_s:.0f} s was spent after {r + 1} rounds"
                break
        if s.scenario == "server" and candidates and candidates[0].batch_size == 1:
            for cid in sorted(procs):
                _server(by_id[cid], procs, ctx, s, notify)
        if s.scenario == "offline":
            for cid in sorted(procs):
                _offline(by_id[cid], procs, ctx, s, notify)
        for cid in list(procs):
            c = by_id[cid]
            c.stopped = f"stopped: {stop_reason}" + (f"; {no_more[cid]}" if cid in no_more else "")
            _exit(c, procs.pop(cid).running, s)
        phases["rounds"] = time.perf_counter() - started
    finally:
        for p in procs.values():
            p.close()
    if s.cold_starts > 1:
        t_cold = time.perf_counter()
        for c in candidates:
            if c.status == "ok":
                _repeat_cold_start(c, ctx, s, notify)
        phases["cold_start"] = time.perf_counter() - t_cold
    during = machine_use(rounds_cpu, s)
    for c in candidates:
        set_validity(c, s.min_rounds, s.objective, during, candidates)
    return phases, during


# Cores' worth of CPU that other processes may use, beyond the cores the
# measurement leaves free, before a group's results are flagged noisy.
BUSY_GATE_CORES = 0.25


def machine_use(rounds_cpu: list[dict[str, float]], s: MeasureSettings) -> dict[str, Any] | None:
    """What other processes used of the machine during a group's rounds (docs/method.md rule 10)."""
    if not rounds_cpu:
        return None
    seconds = sum(r["seconds"] for r in rounds_cpu)
    other = sum(r["other_cores"] * r["seconds"] for r in rounds_cpu) / seconds
    steal = sum(r["steal_cores"] * r["seconds"] for r in rounds_cpu) / seconds
    # Others interfere only once they need cores the workers use: with 32 cores
    # and 2 threads measured, a busy neighbour on the other 30 is no noise.
    # Physical cores, since a process on the other hyperthread of a core the
    # worker runs on slows it down all the same.
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    gate = max(0, cores - s.threads) + BUSY_GATE_CORES
    return {
        "rounds": len(rounds_cpu),
        "seconds": round(seconds, 3),
        "other_cores_mean": round(other, 3),
        "other_cores_max": max(r["other_cores"] for r in rounds_cpu),
        "steal_cores_mean": round(steal, 3),
        "gate_cores": gate,
        "busy": other > gate,
    }


def _repeat_cold_start(c: Candidate, ctx: GroupContext, s: MeasureSettings, notify: Notify) -> None:
    """More fresh processes, one at a time, so cold start gets a CI of its own."""
    assert c.load_s is not None and c.first_call_s is not None
    loads, firsts = [c.load_s], [c.first_call_s]
    imports = [c.settings.get("import_s")]
    for i in range(s.cold_starts - 1):
        notify(f"{c.id}: cold start {i + 2} of {s.cold_starts}", None)
        try:
            reply = run_job(
                ColdStartJob(base=ctx.job_base, load=_load_spec(c, s), cpus=_cpus(s)),
                _threads(c, s),
                ctx.run_dir / "logs" / f"{c.id}-cold{i + 2}.log",
                s.trial_timeout_s,
            )
        except WorkerFailed as exc:
            c.cold_start_error = f"cold start {i + 2} failed: {exc}"
            break
        loads.append(reply["load_s"])
        firsts.append(reply["first_call_s"])
        imports.append(reply.get("import_s"))
    c.cold_starts = {"load": loads, "first_call": firsts}
    timed = [float(x) for x in imports if x is not None]
    if len(timed) == len(imports):
        c.cold_starts["import"] = timed
