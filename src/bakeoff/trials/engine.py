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
from typing import TypeVar

import numpy as np

from bakeoff import environment
from bakeoff.judge import verdict
from bakeoff.trials.entrant import Entrant
from bakeoff.trials.jobs import Exit, Job, Measure, Warmup
from bakeoff.trials.lanes import (
    AfterRace,
    AfterRounds,
    Checked,
    Engine,
    Events,
    Gate,
    GateFailed,
    Lane,
    Outcome,
    Processes,
    enter_all,
    fail,
    more_processes,
)
from bakeoff.trials.launcher import Worker, WorkerFailed
from bakeoff.trials.racing import check_stop, constraint_standing, gross_losers
from bakeoff.trials.settings import TrialSettings
from bakeoff.trials.validity import machine_use, set_validity

E = TypeVar("E", bound=Entrant)

# What the engine's users import from here (its lanes' types live in trials.lanes).
__all__ = [
    "AfterRace",
    "AfterRounds",
    "Checked",
    "Engine",
    "Events",
    "Gate",
    "GateFailed",
    "Outcome",
    "Processes",
    "run_trials",
]


def run_trials(entrants: Sequence[E], jobs: Mapping[str, Job], engine: Engine[E]) -> Outcome:
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
        lanes = enter_all(entrants, jobs, engine)
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
        fail(c, None, f"warm-up failed: {exc}")
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
            fail(c, None, f"failed in round {r + 1}: {exc}")
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
    wanting = []
    for cid in sorted(lanes):
        lane = lanes[cid]
        procs = lane.processes
        more = cid in grow and procs.settled(lane.entrant.round_slots)
        if procs.tried < 2 or (more and procs.tried < verdict.CLOSE_CALL_PROCESSES):
            wanting.append(lane)
    more_processes(wanting, engine, r + 1)
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
            fail(c, None, f"failed while exiting: {exc}")
            return
        finally:
            worker.close()
    c.peak_rss_mb = max(peaks)
    c.set_status("ok")
