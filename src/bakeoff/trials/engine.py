"""The trial engine: a group of candidates, each in its own worker, timed in
randomized interleaved rounds, raced, and judged for validity.

It sees a typed job per candidate, a `Gate` that each freshly started worker
must pass, a `Launcher` that starts workers, the settings and an event sink;
what a scenario adds after the rounds comes as `AfterRounds` hooks.

Loads happen one at a time so cold-start figures are not inflated by a
neighbour, or `load_side_by_side` at a time when the run asks for it (each
entrant's `worker` record then says it did not load alone); during rounds
exactly one worker runs while the others sit blocked on their sockets.

Sampling is adaptive (`racing`): after the minimum rounds, a candidate that the
leader beats by more than `verdict.CLOSE_CALL` is raced out (before them, one it
beats grossly in every round: `racing.gross_losers`); closer contenders
get more worker processes. The group stops once every remaining comparison is
decided, every CI is tight enough, or the budget is spent. Rounds already in
the store (a resumed run) are kept and not measured again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from bakeoff import environment
from bakeoff.judge import verdict
from bakeoff.trials.entrant import Entrant
from bakeoff.trials.jobs import Exit, Measure, MeasuredJob, Warmup
from bakeoff.trials.launcher import Launcher, Worker, WorkerFailed
from bakeoff.trials.racing import check_stop, constraint_standing, gross_losers
from bakeoff.trials.settings import TrialSettings
from bakeoff.trials.validity import machine_use, set_validity

E = TypeVar("E", bound=Entrant)
E_contra = TypeVar("E_contra", bound=Entrant, contravariant=True)


class GateFailed(Exception):
    """The gate could not judge a worker's outputs; the message says why."""


@dataclass(frozen=True)
class Checked:
    """A gate's answer: passed or not, in words (what it found, or why it rejects)."""

    passed: bool
    words: str


class Gate(Protocol[E_contra]):
    def check(self, entrant: E_contra, job: MeasuredJob, record: bool) -> Checked:
        """A worker started for `job` has loaded and written its first outputs: do
        they pass? `record`: keep what was found on the entrant (its measuring
        worker), rather than only judge (a further process of the same build).
        Raises GateFailed when the outputs cannot be judged."""
        ...


class Events(Protocol):
    def note(self, message: str, entrant: Entrant | None) -> None:
        """Progress; `entrant`, when given, has changed (a run saves it)."""
        ...

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
        """Timed calls to keep: the warm-up (round -1) or one round's block, with the
        per-call figures a worker gives beside the timed one (`Timed.extra`)."""
        ...


class AfterRounds(Protocol[E_contra]):
    def __call__(self, entrant: E_contra, worker: Worker, /) -> bool:
        """Run on a candidate still in the race once the rounds are over, with its
        measuring worker. False: the worker was lost (the rounds stand)."""
        ...


class AfterRace(Protocol[E_contra]):
    def __call__(self, lanes: Sequence[tuple[E_contra, Worker]], /) -> set[str]:
        """Run once, after the rounds and the `AfterRounds` hooks, on every candidate
        that entered the rounds and did not fail, the raced-out ones included (each
        with its measuring worker): a measurement across all of them that the race
        did not decide. Returns the ids whose workers were lost (the rounds stand)."""
        ...


# What the engine adds to a candidate's settings at warm-up (and a resumed run reuses).
MEASURING_SETTINGS = ("calls_per_round", "settle_calls")


@dataclass
class Processes:
    """The worker processes of one candidate, which take turns round by round.

    Each has a slot number stored with its rounds, unique within the candidate
    (a resumed run's fresh workers get new ones), so the statistics can tell
    processes apart. The newest process runs first, then the rest in order.
    """

    running: list[tuple[int, Worker]]
    tried: int = 1  # processes started or attempted; a failed start is not retried
    turns_from: int = 0  # the round the current rotation began

    @property
    def first(self) -> Worker:
        """The worker loaded before the rounds: warm-up and the scenarios use it."""
        return self.running[0][1]

    def close(self) -> None:
        for _, w in self.running:
            w.close()

    def settled(self, slots: list[int]) -> bool:
        """Whether each process has run the rounds a process pair needs to count."""
        return all(slots.count(slot) >= verdict.MIN_PAIR_ROUNDS for slot, _ in self.running)

    def turn(self, r: int) -> tuple[int, Worker]:
        n = len(self.running)
        return self.running[(r - self.turns_from - 1) % n] if n > 1 else self.running[0]


@dataclass
class Lane(Generic[E]):
    """One candidate in the rounds: its job, its workers, the calls of its timed blocks."""

    entrant: E
    job: MeasuredJob
    processes: Processes
    calls: int = 0
    settle: int = 0
    short_of: str = ""  # why it has fewer processes than it asked for


@dataclass(frozen=True)
class Outcome:
    """The wall time of each phase, and what other processes used of the machine
    during the rounds (`validity.machine_use`)."""

    phases: dict[str, float]
    machine: dict[str, Any] | None


@dataclass(frozen=True)
class Engine(Generic[E]):
    """What a group is measured with: everything the engine sees besides the candidates."""

    gate: Gate[E]
    launcher: Launcher
    settings: TrialSettings
    events: Events
    after_rounds: Sequence[AfterRounds[E]] = field(default_factory=tuple)
    # With it, a raced-out candidate's workers wait idle (blocked on their sockets,
    # so they take nothing from the rounds) until it has run, instead of exiting.
    after_race: AfterRace[E] | None = None
    # Entrants whose loads take longest: when loads run side by side they start first.
    load_first: frozenset[str] = frozenset()
    # Entrants raced out no sooner than the minimum rounds: the baseline (and
    # scaling references) whose rounds the speedups are computed over.
    baselines: frozenset[str] = frozenset()


class _NotStarted(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def run_trials(
    entrants: Sequence[E], jobs: Mapping[str, MeasuredJob], engine: Engine[E]
) -> Outcome:
    """Fill in cold start, the gate's findings, samples and peak memory of each
    entrant (`jobs`: its worker's job, by id); set each final status and validity."""
    phases = {"load_and_quality": 0.0, "warmup": 0.0, "rounds": 0.0}
    if not entrants:  # a resumed run whose group had finished before the interruption
        return Outcome(phases, None)
    s, events = engine.settings, engine.events
    lanes: dict[str, Lane[E]] = {}
    parked: dict[str, Lane[E]] = {}  # raced out, kept for `after_race`
    rounds_cpu: list[dict[str, float]] = []  # what other processes used, round by round
    try:
        t_phase = time.perf_counter()
        lanes = _enter_all(entrants, jobs, engine)
        phases["load_and_quality"] = time.perf_counter() - t_phase
        t_phase = time.perf_counter()
        for cid in list(lanes):
            if not _warm_up(lanes[cid], s, events):
                lanes.pop(cid).processes.close()
        phases["warmup"] = time.perf_counter() - t_phase
        t_phase = time.perf_counter()
        stop_reason = _rounds(lanes, entrants[0].batch_size, engine, rounds_cpu, parked)
        for hook in engine.after_rounds:
            for cid in sorted(lanes):
                lane = lanes[cid]
                if not hook(lane.entrant, lane.processes.first):
                    lanes.pop(cid).processes.close()
                    lane.entrant.set_status("ok")  # the rounds stand; only the scenario is lost
        if engine.after_race is not None:
            everyone = {**parked, **lanes}
            lost = engine.after_race(
                [(everyone[cid].entrant, everyone[cid].processes.first) for cid in sorted(everyone)]
            )
            for cid in lost:
                lane = lanes.pop(cid) if cid in lanes else parked.pop(cid)
                lane.processes.close()
                lane.entrant.set_status("ok")  # the rounds stand
        for cid in list(parked):
            lane = parked.pop(cid)
            _exit(lane.entrant, lane.processes.running, s)
        for cid in list(lanes):
            lane = lanes.pop(cid)
            why = f"; {lane.short_of}" if lane.short_of else ""
            lane.entrant.stopped = f"stopped: {stop_reason}{why}"
            _exit(lane.entrant, lane.processes.running, s)
        phases["rounds"] = time.perf_counter() - t_phase
    finally:
        for lane in [*lanes.values(), *parked.values()]:
            lane.processes.close()
    machine = machine_use(rounds_cpu, s.threads)
    for c in entrants:
        set_validity(c, s.min_rounds, s.objective, machine, entrants)
    return Outcome(phases, machine)


def _fail(c: Entrant, worker: Worker | None, reason: str) -> None:
    c.set_status("failed", reason)
    if worker is not None:
        worker.close()


def _launch(
    c: Entrant, job: MeasuredJob, engine: Engine[E], started: list[Worker] | None = None
) -> tuple[Worker, dict[str, Any]]:
    """A worker for `job` that has loaded and made its first call, and what it said
    (`started`, when given, gets the worker as soon as it exists). Raises _NotStarted."""
    worker = None
    try:
        worker = engine.launcher.start(job, c.id)
        if started is not None:
            started.append(worker)
        return worker, worker.reply(engine.settings.trial_timeout_s)
    except WorkerFailed as exc:
        if worker is not None:
            worker.close()
        raise _NotStarted("failed", f"load or first call failed: {exc}") from None


def _checked(
    c: E,
    job: MeasuredJob,
    engine: Engine[E],
    started: tuple[Worker, dict[str, Any]],
    record: bool,
    alone: bool = True,
) -> Worker:
    """The started worker once it passed the gate.

    `record`: the entrant's measuring worker, whose load, first call and settings
    are the entrant's (a further process only has to pass); `alone`: it loaded
    while no other worker did. Raises _NotStarted.
    """
    worker, ready = started
    if record:
        c.load_s, c.first_call_s = ready["load_s"], ready["first_call_s"]
        # A resumed candidate keeps the call counts its stored rounds were made with:
        # a new process's warm-up gives other counts, and rounds of mixed lengths
        # cannot be compared (or even stacked).
        kept = {k: c.settings[k] for k in MEASURING_SETTINGS if k in c.settings and c.rounds_ns}
        c.settings = {**ready["settings"], **kept}
        c.model_bytes = ready.get("model_bytes")
        c.worker = {**ready.get("worker", {}), "loaded_alone": alone}
    try:
        checked = engine.gate.check(c, job, record)
    except GateFailed as exc:
        worker.close()
        raise _NotStarted("failed", str(exc)) from None
    if not checked.passed:
        worker.close()
        raise _NotStarted("rejected", checked.words)
    if record:
        engine.events.note(
            f"loaded {c.id} in {c.load_s:.1f} s, first call {c.first_call_s:.2f} s; "
            + checked.words,
            c,
        )
    return worker


def _start_checked(c: E, job: MeasuredJob, engine: Engine[E], record: bool) -> Worker:
    """A worker for `job`, alone, that has loaded, made its first call and passed the
    gate. Raises _NotStarted."""
    return _checked(c, job, engine, _launch(c, job, engine), record)


def _lane(c: E, job: MeasuredJob, worker: Worker) -> Lane[E]:
    # A resumed run's worker is a new process: its rounds get a new slot.
    return Lane(c, job, Processes([(max(c.round_slots, default=-1) + 1, worker)]))


def _not_entered(c: Entrant, exc: _NotStarted, events: Events) -> None:
    c.set_status(exc.status, exc.reason)
    events.note(f"{c.id}: {c.status}: {c.reason}", c)


def _enter(c: E, job: MeasuredJob, engine: Engine[E]) -> Lane[E] | None:
    """Load a candidate's measuring worker through the gate; None if it did not pass."""
    engine.events.note(f"loading {c.id}", c)
    try:
        return _lane(c, job, _start_checked(c, job, engine, record=True))
    except _NotStarted as exc:
        _not_entered(c, exc, engine.events)
        return None


def _enter_all(
    entrants: Sequence[E], jobs: Mapping[str, MeasuredJob], engine: Engine[E]
) -> dict[str, Lane[E]]:
    """Every entrant's measuring worker, loaded and through the gate: one at a time,
    or `load_side_by_side` at a time (nothing is timed yet; their cold starts are
    then marked as not loaded alone). Lanes keep the entrants' order."""
    n = min(engine.settings.load_side_by_side, len(entrants))
    if n <= 1:
        entered = [(c, _enter(c, jobs[c.id], engine)) for c in entrants]
        return {c.id: lane for c, lane in entered if lane is not None}
    engine.events.note(
        f"loading {len(entrants)} candidates, {n} at a time (nothing is timed meanwhile; "
        "their cold starts are marked as not loaded alone)",
        None,
    )
    lanes: dict[str, Lane[E]] = {}
    started: list[Worker] = []  # to stop on Ctrl-C, or the pool would wait for them
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="load") as pool:
        order = sorted(entrants, key=lambda c: c.id not in engine.load_first)
        futures = {pool.submit(_launch, c, jobs[c.id], engine, started): c for c in order}
        try:
            for future in as_completed(futures):
                c = futures[future]
                try:
                    worker = _checked(c, jobs[c.id], engine, future.result(), True, False)
                    lanes[c.id] = _lane(c, jobs[c.id], worker)
                except _NotStarted as exc:
                    _not_entered(c, exc, engine.events)
        except BaseException:
            for f in futures:
                f.cancel()
            for worker in started:
                worker.close()
            raise
    return {c.id: lanes[c.id] for c in entrants if c.id in lanes}


def _calls_per_round(c: Entrant, s: TrialSettings) -> tuple[int, int]:
    """Timed and settling calls per round: fixed, reused for every round
    (docs/method.md rule 4); a resumed candidate keeps those its stored rounds had."""
    if c.rounds_ns and "calls_per_round" in c.settings:
        return int(c.settings["calls_per_round"]), int(c.settings.get("settle_calls", 1))
    typical = float(np.median(c.warmup_ns[len(c.warmup_ns) // 2 :]))
    per_call = max(typical, 1.0)
    calls = int(np.clip(np.ceil(s.slice_s * 1e9 / per_call), 1, 10_000_000))
    calls = -(-calls // s.calls_multiple) * s.calls_multiple
    # Settling matters for short calls only: the switch costs a few ms, noise for
    # a call of hundreds of ms but not worth a call of its own.
    settle = (
        int(np.clip(round(s.settle_s * 1e9 / per_call), 1, 1_000))
        if s.settle_s > 0 and per_call <= 4 * s.settle_s * 1e9
        else 0
    )
    return calls, settle


def _warm_up(lane: Lane[E], s: TrialSettings, events: Events) -> bool:
    c = lane.entrant
    events.note(f"warming up {c.id}", c)
    try:
        reply = lane.processes.first.request(
            Warmup(seconds=s.warmup_s, min_calls=s.warmup_calls), s.trial_timeout_s
        )
    except WorkerFailed as exc:
        _fail(c, None, f"warm-up failed: {exc}")
        return False
    c.warmup_ns = reply["latency_ns"]
    events.timed(c, -1, "warmup", c.warmup_ns, None, 0)
    lane.calls, lane.settle = _calls_per_round(c, s)
    c.settings = {**c.settings, "calls_per_round": lane.calls, "settle_calls": lane.settle}
    events.note(f"{c.id}: {lane.calls} timed calls per round", c)  # persisted for resume
    return True


def _rounds(
    lanes: dict[str, Lane[E]],
    batch_size: int,
    engine: Engine[E],
    rounds_cpu: list[dict[str, float]],
    parked: dict[str, Lane[E]],
) -> str:
    """Round after round until the race, the CIs or the budget end it: why it ended."""
    s = engine.settings
    entered = len(lanes)  # the verdict corrects for all of them, raced-out ones too
    started = time.perf_counter()
    first = min((len(lane.entrant.rounds_ns) for lane in lanes.values()), default=0)
    for r in range(first, s.max_rounds):
        cpu_at_start = environment.cpu_sample()
        if _one_round(r, lanes, s, engine.events):  # one measured before an interruption
            rounds_cpu.append(environment.other_cpu(cpu_at_start, environment.cpu_sample()))
        engine.events.note(
            f"batch {batch_size}: round {r + 1} done "
            f"({len(lanes)} candidates in the race; at least {s.min_rounds} rounds, "
            f"budget {s.budget_s:.0f} s)",
            None,
        )
        if not lanes:
            break
        if r + 1 < s.min_rounds:
            if s.racing and len(lanes) > 2:
                _race_early(r, lanes, entered, engine, parked)
            continue
        if s.racing and len(lanes) >= 2:
            done = _race(r, lanes, entered, engine, parked)
            if done:
                return done
        elif s.racing:
            return f"nothing left to compare after {r + 1} rounds"
        elapsed = time.perf_counter() - started
        if elapsed + elapsed / max(r + 1 - first, 1) > s.budget_s:
            return f"the budget of {s.budget_s:.0f} s was spent after {r + 1} rounds"
    return f"the maximum of {s.max_rounds} rounds"


def _one_round(r: int, lanes: dict[str, Lane[E]], s: TrialSettings, events: Events) -> int:
    """Round r: each candidate's timed block once, in an order that depends on r
    alone (a resumed run continues the same randomized schedule). Returns how
    many blocks were measured (not measured before an interruption)."""
    order = sorted(lanes)
    np.random.default_rng([s.seed, r]).shuffle(order)
    measured = 0
    for cid in order:
        lane = lanes[cid]
        c = lane.entrant
        if len(c.rounds_ns) > r:  # measured before an interruption
            continue
        slot, worker = lane.processes.turn(r)
        try:
            timed = worker.measure(Measure(calls=lane.calls, settle=lane.settle), s.trial_timeout_s)
        except WorkerFailed as exc:
            _fail(c, None, f"failed in round {r + 1}: {exc}")
            lanes.pop(cid).processes.close()
            continue
        c.rounds_ns.append(timed.latency_ns)
        c.block_ns.append(timed.block_ns)
        c.round_slots.append(slot)
        events.timed(c, r, "measure", timed.latency_ns, timed.block_ns, slot, timed.extra)
        measured += 1
    return measured


def _retire(lane: Lane[E], why: str, engine: Engine[E], parked: dict[str, Lane[E]]) -> None:
    """A candidate raced out: its workers exit, or wait for `after_race`."""
    c = lane.entrant
    c.stopped = why
    if engine.after_race is not None:
        parked[c.id] = lane
    else:
        _exit(c, lane.processes.running, engine.settings)
    engine.events.note(f"{c.id}: {why}", c)


def _race(
    r: int,
    lanes: dict[str, Lane[E]],
    entered: int,
    engine: Engine[E],
    parked: dict[str, Lane[E]],
) -> str | None:
    """After round r: stop who cannot win, start more processes for close calls.
    Returns why the group is done, or None."""
    s = engine.settings
    active = [lane.entrant for lane in lanes.values()]
    # Decide only once every contender has had its second process (or tried to:
    # one that would not start is not retried).
    multi = all(lane.processes.tried >= 2 for lane in lanes.values())
    room = {
        cid
        for cid, lane in lanes.items()
        if lane.processes.tried < verdict.CLOSE_CALL_PROCESSES
        or not lane.processes.settled(lane.entrant.round_slots)
    }
    beyond, maybe = constraint_standing(active, s.constraints)
    raced, done, grow = check_stop(active, s, multi, beyond, maybe, room, compared=entered)
    for cid, why in raced.items():
        _retire(lanes.pop(cid), why, engine, parked)
    if done:
        return done
    for cid in sorted(lanes):
        lane = lanes[cid]
        procs = lane.processes
        more = cid in grow and procs.settled(lane.entrant.round_slots)
        if procs.tried < 2 or (more and procs.tried < verdict.CLOSE_CALL_PROCESSES):
            why = _another_process(lane, engine, r + 1)
            if why:
                lane.short_of = why
    return None


def _race_early(
    r: int,
    lanes: dict[str, Lane[E]],
    entered: int,
    engine: Engine[E],
    parked: dict[str, Lane[E]],
) -> None:
    """Before the minimum rounds: stop who trails the leader grossly in every round."""
    active = [lane.entrant for lane in lanes.values()]
    gone = gross_losers(active, engine.settings, engine.baselines, entered)
    for cid, why in gone.items():
        _retire(lanes.pop(cid), why, engine, parked)


def _another_process(lane: Lane[E], engine: Engine[E], next_round: int) -> str:
    """Start one more worker for a close contender; it too must pass the gate.

    Returns why it could not, or "" if it started.
    """
    c, procs, s = lane.entrant, lane.processes, engine.settings
    nth = {2: "second", 3: "third"}.get(procs.tried + 1, f"process {procs.tried + 1}")
    engine.events.note(
        f"{c.id}: still close after {next_round} rounds, starting a {nth} process", c
    )
    w: Worker | None = None
    reason = ""
    try:
        w = _start_checked(c, lane.job, engine, record=False)
        w.request(Warmup(seconds=s.warmup_s, min_calls=s.warmup_calls), s.trial_timeout_s)
    except _NotStarted as exc:
        reason = exc.reason
    except WorkerFailed as exc:
        assert w is not None
        w.close()
        w, reason = None, str(exc)
    if w is None:
        procs.tried = verdict.CLOSE_CALL_PROCESSES  # a start that failed is not retried
        n = len(procs.running)
        why = f"no {nth} process ({reason}); its CI covers {n} process{'es' if n > 1 else ''}"
        engine.events.note(f"{c.id}: {why}", c)
        return why
    procs.tried += 1
    slot = max(slot for slot, _ in procs.running) + 1
    procs.running.append((slot, w))
    procs.turns_from = next_round
    return ""


def _exit(c: Entrant, processes: list[tuple[int, Worker]], s: TrialSettings) -> None:
    peaks = []
    for _, worker in processes:
        try:
            said = worker.request(Exit(), s.trial_timeout_s)
            peaks.append(said["peak_rss_mb"])
            # What a worker can only say at the end (a training stack's ranks' memory,
            # its communication share) joins what it said when ready.
            c.worker.update(said.get("worker") or {})
        except WorkerFailed as exc:
            _fail(c, None, f"failed while exiting: {exc}")
            return
        finally:
            worker.close()
    c.peak_rss_mb = max(peaks)
    c.set_status("ok")
