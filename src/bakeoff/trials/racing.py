"""Racing: after each round, which candidates stop and whether the group is done.

A candidate the leader beats by more than `verdict.CLOSE_CALL` (with the
Bonferroni-corrected CI) is raced out; a closer contender gets more worker
processes, since a close call needs several process pairs to agree
(`verdict.judge`); a candidate surely beyond a constraint stops, since it cannot
win. The group is done once every comparison is decided or every CI is tight.

Before the minimum rounds only a gross gap counts (`gross_losers`): a candidate
slower than the leader by `GROSS_GAP` in each of at least `EARLY_ROUNDS` paired
rounds, and beyond `verdict.CLOSE_CALL` with the corrected CI too, stops early.
A gap that size in every round is no matter of noise (rounds spread by about
10%), and a loser that no longer takes its turn in every round stops holding the
leader's and the baseline's rounds back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from bakeoff.judge import stats, verdict
from bakeoff.judge.constraints import breaches
from bakeoff.trials.entrant import Entrant
from bakeoff.trials.settings import TrialSettings

# Rounds a candidate must have, and by how much it must trail the leader in every
# one of them, to be raced out before the minimum rounds.
EARLY_ROUNDS = 3
# 1.25: rounds spread by about 10%, so a gap of 25% in every one of three rounds is no
# matter of noise; and on a slow CPU (AVX2, 2 cores, MiniLM) losers at 1.25-1.6x held
# every batch-32 round at 4.5 s through the minimum, where leader and baseline take 1.7.
GROSS_GAP = 1.25
# How `stopped` begins for such a candidate: its fewer rounds are not too few
# (`validity.set_validity`), since it stopped on a gap that needs no more.
RACED_OUT_EARLY = "raced out early"


def raced_out_early(c: Entrant) -> bool:
    return c.stopped.startswith(RACED_OUT_EARLY)


def measured(c: Entrant, rounds: int) -> verdict.Measured:
    return verdict.Measured(
        c.id,
        c.samples()[:rounds],
        np.asarray(c.block_ns[:rounds]),
        c.batch_size,
        np.asarray(c.round_slots[:rounds], dtype=np.int64),
    )


def relative_half_width(m: verdict.Measured, objective: str) -> float:
    if objective == "latency":
        iv = stats.latency_percentiles(m.samples_ns)["p50"]
    else:
        iv = stats.throughput(m.calls, m.block_ns, m.batch_size)
    return (iv.hi - iv.lo) / 2.0 / iv.value if iv.value > 0 else float("inf")


def constraint_standing(
    active: Sequence[Entrant], constraints: Mapping[str, float]
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
        found = [b for b in breaches(c.figures(limits), limits) if b.measured]
        sure = [b.words for b in found if b.certain]
        if sure:
            beyond[c.id] = "; ".join(sure)
        elif found:
            maybe.add(c.id)
    return beyond, maybe


def check_stop(
    active: Sequence[Entrant],
    s: TrialSettings,
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
    ms = {c.id: measured(c, rounds) for c in active if c.id not in out}
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
    if all(relative_half_width(m, s.objective) <= s.ci_target for m in ms.values()):
        return out, f"every CI within +-{s.ci_target:.0%} after {rounds} rounds", set()
    return out, None, set()


def gross_losers(
    active: Sequence[Entrant], s: TrialSettings, keep: frozenset[str], compared: int
) -> dict[str, str]:
    """Before the minimum rounds: which candidates trail the leader grossly (id ->
    why). Never one in `keep` (a baseline others' speedups are over), and nothing
    where the workload has constraints (the leader might be one the verdict
    excludes)."""
    rounds = min(len(c.rounds_ns) for c in active)
    if rounds < EARLY_ROUNDS or s.constraints or len(active) < 2:
        return {}
    ms = {c.id: measured(c, rounds) for c in active}
    leader = max(ms.values(), key=lambda m: verdict.score(m, s.objective))
    lead = stats.per_round(leader.samples_ns, leader.block_ns, s.objective)
    level = verdict.comparison_level(max(len(ms), compared))
    out: dict[str, str] = {}
    for m in ms.values():
        if m.id == leader.id or m.id in keep:
            continue
        own = stats.per_round(m.samples_ns, m.block_ns, s.objective)
        # Per round, how many times faster the leader was (latency: lower is better).
        gaps = own / lead if s.objective == "latency" else lead / own
        if float(gaps.min()) < GROSS_GAP:
            continue
        iv = verdict.judge(m, leader, s.objective, level, s.margin).ratio
        if iv.lo > 1.0 + max(s.margin, verdict.CLOSE_CALL):
            out[m.id] = (
                f"{RACED_OUT_EARLY}, after {rounds} rounds: {leader.id} was "
                f"{float(gaps.min()):.2f}x faster or more in every round "
                f"({iv.value:.2f}x, {level:.1%} CI {iv.lo:.2f}-{iv.hi:.2f})"
            )
    return out
