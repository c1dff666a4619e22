"""The trial engine's lanes: what it sees (gate, events, launcher, settings), one
candidate's worker processes, and starting a worker through the gate, for the
group's first workers and for the further processes a close call gets.

A worker that starts must load, make its first call and pass the gate before it
is timed; one that does not is the candidate's failure or rejection, never the
run's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from bakeoff.judge import verdict
from bakeoff.trials.entrant import Entrant
from bakeoff.trials.jobs import Job, Warmup
from bakeoff.trials.launcher import Launcher, Worker, WorkerFailed
from bakeoff.trials.settings import TrialSettings

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
    def check(self, entrant: E_contra, job: Job, record: bool) -> Checked:
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
    job: Job
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


class NotStarted(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def fail(c: Entrant, worker: Worker | None, reason: str) -> None:
    c.set_status("failed", reason)
    if worker is not None:
        worker.close()


def launch(
    c: Entrant, job: Job, engine: Engine[E], started: list[Worker] | None = None
) -> tuple[Worker, dict[str, Any]]:
    """A worker for `job` that has loaded and made its first call, and what it said
    (`started`, when given, gets the worker as soon as it exists). Raises NotStarted."""
    worker = None
    try:
        worker = engine.launcher.start(job, c.id)
        if started is not None:
            started.append(worker)
        return worker, worker.reply(engine.settings.trial_timeout_s)
    except WorkerFailed as exc:
        if worker is not None:
            worker.close()
        if exc.not_needed:  # its build step's own tool found it would add nothing
            raise NotStarted("unavailable", str(exc)) from None
        raise NotStarted("failed", f"load or first call failed: {exc}") from None


def checked(
    c: E,
    job: Job,
    engine: Engine[E],
    started: tuple[Worker, dict[str, Any]],
    record: bool,
    alone: bool = True,
) -> Worker:
    """The started worker once it passed the gate.

    `record`: the entrant's measuring worker, whose load, first call and settings
    are the entrant's (a further process only has to pass); `alone`: it loaded
    while no other worker did. Raises NotStarted.
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
        raise NotStarted("failed", str(exc)) from None
    if not checked.passed:
        worker.close()
        raise NotStarted("rejected", checked.words)
    if record:
        engine.events.note(
            f"loaded {c.id} in {c.load_s:.1f} s, first call {c.first_call_s:.2f} s; "
            + checked.words,
            c,
        )
    return worker


def start_checked(c: E, job: Job, engine: Engine[E], record: bool) -> Worker:
    """A worker for `job`, alone, that has loaded, made its first call and passed the
    gate. Raises NotStarted."""
    return checked(c, job, engine, launch(c, job, engine), record)


def new_lane(c: E, job: Job, worker: Worker) -> Lane[E]:
    # A resumed run's worker is a new process: its rounds get a new slot.
    return Lane(c, job, Processes([(max(c.round_slots, default=-1) + 1, worker)]))


def not_entered(c: Entrant, exc: NotStarted, events: Events) -> None:
    c.set_status(exc.status, exc.reason)
    events.note(f"{c.id}: {c.status}: {c.reason}", c)


def enter(c: E, job: Job, engine: Engine[E]) -> Lane[E] | None:
    """Load a candidate's measuring worker through the gate; None if it did not pass."""
    engine.events.note(f"loading {c.id}", c)
    try:
        return new_lane(c, job, start_checked(c, job, engine, record=True))
    except NotStarted as exc:
        not_entered(c, exc, engine.events)
        return None


def enter_all(
    entrants: Sequence[E], jobs: Mapping[str, Job], engine: Engine[E]
) -> dict[str, Lane[E]]:
    """Every entrant's measuring worker, loaded and through the gate: one at a time,
    or `load_side_by_side` at a time (nothing is timed yet; their cold starts are
    then marked as not loaded alone). Lanes keep the entrants' order."""
    n = min(engine.settings.load_side_by_side, len(entrants))
    if n <= 1:
        entered = [(c, enter(c, jobs[c.id], engine)) for c in entrants]
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
        futures = {pool.submit(launch, c, jobs[c.id], engine, started): c for c in order}
        try:
            for future in as_completed(futures):
                c = futures[future]
                try:
                    worker = checked(c, jobs[c.id], engine, future.result(), True, False)
                    lanes[c.id] = new_lane(c, jobs[c.id], worker)
                except NotStarted as exc:
                    not_entered(c, exc, engine.events)
        except BaseException:
            for f in futures:
                f.cancel()
            for worker in started:
                worker.close()
            raise
    return {c.id: lanes[c.id] for c in entrants if c.id in lanes}


def more_processes(wanting: list[Lane[E]], engine: Engine[E], next_round: int) -> None:
    """One more worker for each close contender in `wanting`. Nothing is timed while
    they start, so they load `load_side_by_side` at a time, as the group's first
    workers did (a further process's load is no figure of the run); each then passes
    the gate and warms up alone.

    Each starts from its candidate's first worker's compiled kernels
    (`reuse_compiles`): its load is not timed, and its rounds run the same code."""
    n = min(engine.settings.load_side_by_side, len(wanting))
    jobs = [dataclasses.replace(lane.job, reuse_compiles=True) for lane in wanting]
    if n <= 1:
        for lane, job in zip(wanting, jobs, strict=True):
            _starting(lane, engine, next_round)
            _add_process(lane, engine, job, _launched(lane.entrant, job, engine), next_round)
        return
    for lane in wanting:
        _starting(lane, engine, next_round)
    started: list[Worker] = []  # to stop on Ctrl-C, or the pool would wait for them
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="load") as pool:
        try:
            got = list(
                pool.map(
                    lambda lane, job: _launched(lane.entrant, job, engine, started), wanting, jobs
                )
            )
        except BaseException:
            for worker in started:
                worker.close()
            raise
    for lane, job, found in zip(wanting, jobs, got, strict=True):
        _add_process(lane, engine, job, found, next_round)


def _starting(lane: Lane[E], engine: Engine[E], next_round: int) -> None:
    c = lane.entrant
    nth = _nth(lane.processes.tried + 1)
    engine.events.note(
        f"{c.id}: still close after {next_round} rounds, starting a {nth} process", c
    )


def _launched(
    c: E, job: Job, engine: Engine[E], started: list[Worker] | None = None
) -> tuple[Worker, dict[str, Any]] | str:
    """`launch`, or why the worker did not start (in a loading thread: nothing here
    touches the run's records)."""
    try:
        return launch(c, job, engine, started)
    except NotStarted as exc:
        return exc.reason


def _nth(n: int) -> str:
    return {2: "second", 3: "third"}.get(n, f"process {n}")


def _add_process(
    lane: Lane[E],
    engine: Engine[E],
    job: Job,
    launched: tuple[Worker, dict[str, Any]] | str,
    next_round: int,
) -> None:
    """Put a further worker that passes the gate, warmed up, in the rotation; or
    record why there is none (a start that failed is not retried)."""
    c, procs, s = lane.entrant, lane.processes, engine.settings
    nth = _nth(procs.tried + 1)
    found: Worker | str = launched if isinstance(launched, str) else ""
    if not isinstance(launched, str):
        try:
            found = checked(c, job, engine, launched, record=False)
        except NotStarted as exc:
            found = exc.reason
    w, reason = (None, found) if isinstance(found, str) else (found, "")
    if w is not None:
        try:
            w.request(Warmup(seconds=s.warmup_s, min_calls=s.warmup_calls), s.trial_timeout_s)
        except WorkerFailed as exc:
            w.close()
            w, reason = None, str(exc)
    if w is None:
        procs.tried = verdict.CLOSE_CALL_PROCESSES
        n = len(procs.running)
        why = f"no {nth} process ({reason}); its CI covers {n} process{'es' if n > 1 else ''}"
        engine.events.note(f"{c.id}: {why}", c)
        lane.short_of = why
        return
    procs.tried += 1
    slot = max(slot for slot, _ in procs.running) + 1
    procs.running.append((slot, w))
    procs.turns_from = next_round
