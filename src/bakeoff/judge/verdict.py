"""Naming a winner per batch size, honestly.

The objective is p50 latency at batch 1 and measured throughput above it,
unless the workload says otherwise. "A beats B" needs the paired ratio's 95%
CI to exclude 1; otherwise the two are reported as tied, with why.

`decide` settles who leads and where it stands; verdict_words says it, and
thresholds holds the numbers both go by.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bakeoff.judge import stats
from bakeoff.judge import verdict_words as words
from bakeoff.judge.comparison import Comparison, Judgement
from bakeoff.judge.stats import Interval
from bakeoff.judge.thresholds import (
    CLOSE_CALL,
    CLOSE_CALL_PROCESSES,
    DEFAULT_MARGIN,
    FAMILY_ALPHA,
    MIN_PAIR_ROUNDS,
    NOISY_CV,
)


@dataclass(frozen=True)
class Measured:
    """The timing record of one ok candidate: rounds x calls samples, paired by round."""

    id: str
    samples_ns: np.ndarray  # shape (rounds, calls per round)
    block_ns: np.ndarray  # shape (rounds,): wall time of each round's timed block
    batch_size: int
    slots: np.ndarray | None = None  # shape (rounds,): which worker process ran each round
    # shape (rounds,): the work each round's block did, where it is not its calls
    # (a generative round's output tokens); throughput counts it instead.
    units: np.ndarray | None = None

    @property
    def calls(self) -> np.ndarray:
        if self.units is not None:
            return self.units
        return np.full(len(self.block_ns), self.samples_ns.shape[1])


@dataclass(frozen=True)
class Verdict:
    """Who leads at one batch size, and what that is worth.

    `winner` is the leader: the best point estimate among eligible candidates.
    Whether it is *separated* from the others and from the baseline is the
    `standing` (see STANDINGS), and the `headline` says it in one sentence.
    """

    batch_size: int
    objective: str
    winner: str | None
    baseline: str | None
    speedup: Interval | None
    ranking: list[str]
    ties: list[list[str]] = field(default_factory=list)
    reason: str = ""  # the headline and points in one paragraph, for logs
    # Measured candidates beyond the workload's [constraints]: id -> why; not ranked.
    excluded: dict[str, str] = field(default_factory=dict)
    standing: str = ""
    headline: str = ""
    points: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    comparisons: list[dict] = field(default_factory=list)
    level: float | None = None
    margin: float | None = None
    # What to take: the winner, or among those speed cannot separate from it the one
    # judge.recommend picks by quality, memory and cold start; `recommendation` says
    # why when it had to pick. None before recommend runs (and with no winner).
    recommended: str | None = None
    recommendation: str = ""

    def __post_init__(self) -> None:
        if self.winner is not None and self.winner not in self.ranking:
            raise ValueError("the winner must be ranked")
        if self.recommended is not None and self.recommended not in self.ranking:
            raise ValueError("the recommended candidate must be ranked")
        if not self.reason:
            raise ValueError("a verdict needs a reason in words")

    @property
    def beats_baseline(self) -> bool | None:
        """True: the leader is separated from (faster than) the baseline; None: no
        baseline was measured to say."""
        if self.standing == "no-baseline" or not self.standing:
            return None
        return self.standing in ("clear", "leads")

    def with_caveat(self, caveat: str) -> Verdict:
        """The same verdict with one more point, read with every figure it gives."""
        return dataclasses.replace(
            self, points=[*self.points, caveat], reason=f"{self.reason} {caveat}"
        )

    def to_dict(self) -> dict:
        return {
            "batch_size": self.batch_size,
            "objective": self.objective,
            "winner": self.winner,
            "recommended": self.recommended,
            "recommendation": self.recommendation,
            "baseline": self.baseline,
            "standing": self.standing,
            "beats_baseline": self.beats_baseline,
            "headline": self.headline,
            "points": self.points,
            "details": self.details,
            "speedup": None
            if self.speedup is None
            else {"value": self.speedup.value, "ci95": [self.speedup.lo, self.speedup.hi]},
            "ranking": self.ranking,
            "ties": self.ties,
            "comparisons": self.comparisons,
            "level": self.level,
            "margin": self.margin,
            "reason": self.reason,
            "excluded_by_constraints": self.excluded,
        }


def chosen(verdict: Mapping[str, Any]) -> str | None:
    """The candidate a verdict in a document says to take: its `recommended` (the
    winner, or the pick among those tied with it); documents stored before there was
    a recommendation have only the winner."""
    return verdict.get("recommended") or verdict.get("winner")


def objective_for(batch_size: int, requested: str) -> str:
    if requested in ("latency", "throughput"):
        return requested
    if requested == "cost":
        # On one machine the cost of an inference is its price per hour over the
        # samples it does in an hour: the cheapest is the one with the most samples/s.
        return "throughput"
    return "latency" if batch_size == 1 else "throughput"


def score(m: Measured, objective: str) -> float:
    """Higher is better."""
    if objective == "latency":
        return -float(np.median(m.samples_ns))
    return stats.throughput(m.calls, m.block_ns, m.batch_size).value


def speedup(base: Measured, cand: Measured, objective: str, level: float = 0.95) -> Interval:
    """How many times faster `cand` is than `base` on the objective (> 1: faster)."""
    rounds = min(len(base.block_ns), len(cand.block_ns))
    slots = stats.pair_slots(base.slots, cand.slots, rounds)
    if objective == "latency":
        return stats.paired_latency_ratio(base.samples_ns, cand.samples_ns, level, slots)
    return stats.paired_throughput_ratio(
        base.calls, base.block_ns, cand.calls, cand.block_ns, level, slots
    )


def comparison_level(n_candidates: int, alpha: float = FAMILY_ALPHA) -> float:
    """Bonferroni: k-1 comparisons against the leader share one 5% error budget."""
    return 1.0 - alpha / max(1, n_candidates - 1)


def compare(ratio: Interval, margin: float) -> str:
    """'faster' (CI above 1+margin), 'slower' (below 1-margin), 'equivalent' (inside
    1 +- margin) or 'undecided' (the CI straddles a margin edge)."""
    if ratio.lo > 1.0 + margin:
        return "faster"
    if ratio.hi < 1.0 - margin:
        return "slower"
    if ratio.lo >= 1.0 - margin and ratio.hi <= 1.0 + margin:
        return "equivalent"
    return "undecided"


def process_pair_ratios(base: Measured, cand: Measured, objective: str) -> list[float]:
    """The speedup within each pair of worker processes that shared at least
    MIN_PAIR_ROUNDS rounds: separate looks at one comparison."""
    rounds = min(len(base.block_ns), len(cand.block_ns))
    slots = stats.pair_slots(base.slots, cand.slots, rounds)
    if slots is None:
        slots = np.zeros(rounds, np.int64)
    out = []
    for pair in np.unique(slots):
        idx = np.flatnonzero(slots == pair)
        if len(idx) < MIN_PAIR_ROUNDS:
            continue
        if objective == "latency":
            ratio = np.median(base.samples_ns[idx]) / np.median(cand.samples_ns[idx])
        else:
            cand_rate = cand.calls[idx].sum() / cand.block_ns[idx].astype(np.float64).sum()
            base_rate = base.calls[idx].sum() / base.block_ns[idx].astype(np.float64).sum()
            ratio = cand_rate / base_rate
        out.append(float(ratio))
    return out


def judge(base: Measured, cand: Measured, objective: str, level: float, margin: float) -> Judgement:
    """`compare` on the paired ratio, with close calls held to every process pair.

    The bootstrap resamples processes, but with two per candidate it cannot
    tell a real gap of a few percent from two process effects that fell the
    same way. So a decision whose CI stays within CLOSE_CALL of 1 needs
    CLOSE_CALL_PROCESSES pairs of processes that each put the ratio beyond the
    margin on the same side.
    """
    iv = speedup(base, cand, objective, level)
    decision = compare(iv, margin)
    gap = max(margin, CLOSE_CALL)
    close = (decision == "faster" and iv.lo <= 1.0 + gap) or (
        decision == "slower" and iv.hi >= 1.0 / (1.0 + gap)
    )
    if not close:
        return Judgement(iv, decision)
    pairs = process_pair_ratios(base, cand, objective)
    seen = ", ".join(f"{r:.3f}" for r in pairs) or "none yet"
    if len(pairs) < CLOSE_CALL_PROCESSES:
        why = (
            f"a close call needs {CLOSE_CALL_PROCESSES} pairs of processes that agree, "
            f"and {len(pairs)} had {MIN_PAIR_ROUNDS}+ rounds (ratios {seen})"
        )
        return Judgement(iv, "undecided", why, needs_processes=True)
    if decision == "faster":
        agree = all(r > 1.0 + margin for r in pairs)
    else:
        agree = all(r < 1.0 - margin for r in pairs)
    if not agree:
        why = f"its process pairs disagree (ratios {seen}; margin {margin:.0%})"
        return Judgement(iv, "undecided", why)
    return Judgement(iv, decision)


def _why_tied(
    m: Measured, objective: str, min_rounds: int, judged: Judgement, margin: float, pairs: int
) -> str:
    """Why the leader is not separated from `m`, as a short clause; `pairs`: how
    many pairs of processes had enough rounds to be a look of their own."""
    if judged.needs_processes:
        return (
            f"a gap under {CLOSE_CALL:.0%} counts only when {CLOSE_CALL_PROCESSES} pairs of "
            f"worker processes each show it, and {pairs} pair{'s' if pairs != 1 else ''} had "
            f"{MIN_PAIR_ROUNDS}+ rounds"
        )
    if judged.why:
        return judged.why
    rounds = len(m.block_ns)
    cv = stats.round_to_round_cv(m.samples_ns, m.block_ns, objective)
    if rounds < min_rounds:
        return f"only {rounds} rounds"
    if cv > NOISY_CV:
        return f"round-to-round spread {cv:.0%}"
    if judged.decision == "equivalent":
        return f"equivalent: the CI lies within the {margin:.0%} margin"
    return f"the CI reaches within the {margin:.0%} margin"


# standing: what the verdict's first sentence says (see verdict_words.headline).
STANDINGS = ("clear", "leads", "baseline-leads", "baseline-tied", "no-baseline", "none")


def decide(
    batch_size: int,
    objective: str,
    measured: list[Measured],
    baseline_id: str | None,
    not_ok: dict[str, str] | None = None,
    margin: float = DEFAULT_MARGIN,
    min_rounds: int = 10,
    excluded: dict[str, str] | None = None,
) -> Verdict:
    """Rank ok candidates; `not_ok` maps other candidate ids to why they were left out.

    A candidate is tied with the leader unless the leader is faster by more than
    the equivalence margin with the Bonferroni-corrected CI of the paired ratio
    (and, for a close call, in enough pairs of processes: `judge`). Candidates in
    `excluded` (beyond the workload's constraints) are measured but neither ranked
    nor eligible; one may still be the baseline a speedup is over.
    """
    excluded = excluded or {}
    eligible = [m for m in measured if m.id not in excluded]
    if not eligible:
        return _without_leader(
            batch_size, objective, measured, baseline_id, not_ok, margin, excluded
        )
    ranked = sorted(eligible, key=lambda m: score(m, objective), reverse=True)
    leader = ranked[0]
    base = {m.id: m for m in measured}.get(baseline_id) if baseline_id else None
    base_eligible = base is not None and base.id not in excluded
    # The baseline beyond the constraints is compared too, as one more comparison.
    compared = ranked[1:] + ([base] if base is not None and not base_eligible else [])
    level = comparison_level(len(compared) + 1)
    comparisons = _against_leader(leader, compared, objective, level, margin, min_rounds, excluded)
    tied = [c.id for c in comparisons if c.eligible and c.judged.decision != "faster"]
    gain = speedup(base, leader, objective) if base is not None else None
    standing = _standing(base, leader, comparisons, tied)
    out_why = (not_ok or {}).get(baseline_id or "", "it was not measured")
    head = words.headline(
        standing, leader.id, baseline_id, tied, gain, len(ranked) - 1, out_why, base_eligible
    )
    points = words.points(leader.id, baseline_id, standing, comparisons, tied, excluded)
    return Verdict(
        batch_size,
        objective,
        leader.id,
        baseline_id,
        gain,
        [m.id for m in ranked],
        [[leader.id, *tied]] if tied else [],
        f"Batch {batch_size} ({objective}): " + " ".join([head, *points]),
        dict(excluded),
        standing=standing,
        headline=head,
        points=points,
        details=words.details(objective, level, margin, leader.id, comparisons, baseline_id, gain),
        comparisons=[c.to_dict() for c in comparisons],
        level=level,
        margin=margin,
    )


def _without_leader(
    batch_size: int,
    objective: str,
    measured: list[Measured],
    baseline_id: str | None,
    not_ok: dict[str, str] | None,
    margin: float,
    excluded: dict[str, str],
) -> Verdict:
    """The verdict when no candidate is eligible: none measured, or all beyond the
    constraints."""
    head, points = words.no_leader(bool(measured), excluded, not_ok or {})
    return Verdict(
        batch_size,
        objective,
        None,
        baseline_id,
        None,
        [],
        [],
        f"Batch {batch_size} ({objective}): " + " ".join([head, *points]),
        dict(excluded),
        standing="none",
        headline=head,
        points=points,
        margin=margin,
    )


def _against_leader(
    leader: Measured,
    compared: list[Measured],
    objective: str,
    level: float,
    margin: float,
    min_rounds: int,
    excluded: dict[str, str],
) -> list[Comparison]:
    """The leader judged against each other candidate: separated, or why not."""
    out = []
    for m in compared:
        j = judge(m, leader, objective, level, margin)
        pairs = process_pair_ratios(m, leader, objective)
        why = (
            ""
            if j.decision == "faster"
            else _why_tied(m, objective, min_rounds, j, margin, len(pairs))
        )
        out.append(Comparison(m.id, j, level, pairs, why, m.id not in excluded))
    return out


def _standing(
    base: Measured | None, leader: Measured, comparisons: list[Comparison], tied: list[str]
) -> str:
    """Where the leader stands (see STANDINGS): against the baseline, and whether any
    eligible candidate is left tied with it."""
    if base is None:
        return "no-baseline"
    if base.id == leader.id:
        return "baseline-leads"
    vs_base = next((c for c in comparisons if c.id == base.id), None)
    if vs_base is not None and vs_base.judged.decision == "faster":
        return "leads" if tied else "clear"
    return "baseline-tied"


def brief(v: dict[str, Any], objective: str, reason: str) -> dict[str, Any]:
    """A verdict (`Verdict.to_dict()`) as the training and generative documents give
    one: the objective named in the kind's words, the winner and its standing, the
    speedup as `ratio`, the ranking and ties, why, and the headline."""
    return {
        "objective": objective,
        "winner": v["winner"],
        "standing": v["standing"],
        "baseline": v["baseline"],
        "ratio": v["speedup"],
        "ranking": v["ranking"],
        "ties": v["ties"],
        "reason": reason,
        "headline": v["headline"],
    }
