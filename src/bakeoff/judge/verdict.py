"""Naming a winner per batch size, honestly.

The objective is p50 latency at batch 1 and measured throughput above it,
unless the workload says otherwise. "A beats B" needs the paired ratio's 95%
CI to exclude 1; otherwise the two are reported as tied, with why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from bakeoff.judge import stats
from bakeoff.judge.stats import Interval


@dataclass(frozen=True)
class Measured:
    """The timing record of one ok candidate: rounds x calls samples, paired by round."""

    id: str
    samples_ns: np.ndarray  # shape (rounds, calls per round)
    block_ns: np.ndarray  # shape (rounds,): wall time of each round's timed block
    batch_size: int
    slots: np.ndarray | None = None  # shape (rounds,): which worker process ran each round

    @property
    def calls(self) -> np.ndarray:
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

    def __post_init__(self) -> None:
        if self.winner is not None and self.winner not in self.ranking:
            raise ValueError("the winner must be ranked")
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


def objective_for(batch_size: int, requested: str) -> str:
    if requested in ("latency", "throughput"):
        return requested
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


DEFAULT_MARGIN = 0.02
NOISY_CV = 0.10  # round-to-round spread above which a result is flagged noisy
FAMILY_ALPHA = 0.05


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


# Two worker processes of one model can differ by a few percent for good (memory
# layout, page placement: a property of the process, not of the runtime). So a
# gap whose CI does not clear this is a close call, which no single pair of
# processes can settle however many rounds it runs.
CLOSE_CALL = 0.10
# A close call is decided only when this many pairs of processes, each with
# MIN_PAIR_ROUNDS rounds, show it on their own. With two pairs, two identical
# ONNX Runtime candidates whose process effects fell the same way were called
# "faster" in 4 of 60 A/A verdicts (benchmarks/aa_test.py); with three, in none
# of 90 (digits and MiniLM, batch 1 and 32).
CLOSE_CALL_PROCESSES = 3
MIN_PAIR_ROUNDS = 2


@dataclass(frozen=True)
class Judgement:
    """One pairwise comparison: how much faster `cand` is than `base`, and the call."""

    ratio: Interval
    decision: str  # faster | slower | equivalent | undecided (see `compare`)
    why: str = ""  # why a close call was left undecided
    needs_processes: bool = False  # more processes each could decide it


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


def _fmt(iv: Interval) -> str:
    return f"{iv.value:.2f}× (CI {iv.lo:.2f}–{iv.hi:.2f})"


def _names(ids: list[str]) -> str:
    """ "a", "a and b", "a, b and c"; beyond four, "a, b, c and 3 others"."""
    if len(ids) > 4:
        return f"{', '.join(ids[:3])} and {len(ids) - 3} others"
    return ids[0] if len(ids) == 1 else f"{', '.join(ids[:-1])} and {ids[-1]}"


@dataclass(frozen=True)
class Comparison:
    """The leader against one other measured candidate: how many times faster the
    leader is, what was decided, and (when not separated) why, in one line."""

    id: str
    judged: Judgement
    level: float
    pair_ratios: list[float]
    why_tied: str = ""  # empty when the leader is separated from (faster than) it
    eligible: bool = True  # False: measured, but beyond the workload's constraints

    def to_dict(self) -> dict:
        iv = self.judged.ratio
        return {
            "id": self.id,
            "ratio": iv.value,
            "ci": [iv.lo, iv.hi],
            "level": self.level,
            "decision": self.judged.decision,
            "why": self.why_tied,
            "process_pair_ratios": self.pair_ratios,
            "eligible": self.eligible,
        }


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


# standing: what the verdict's first sentence says (see `headline`).
STANDINGS = ("clear", "leads", "baseline-leads", "baseline-tied", "no-baseline", "none")


def headline(
    standing: str,
    leader: str | None,
    baseline: str | None,
    tied: list[str],
    gain: Interval | None,
    others: int,
    baseline_out: str = "",
    baseline_eligible: bool = True,
) -> str:
    """The verdict's first sentence: one a user can act on, which nothing after it
    contradicts. A leader not separated from the baseline gets no speedup in it.

    `tied`: the candidates not separated from the leader, best first; `others`: how
    many eligible candidates besides the leader were compared.
    """
    if standing == "none" or leader is None:
        raise ValueError("a verdict without a leader has its own sentence (see decide)")
    apart = f"not yet separated from {_names(tied)}" if tied else ""
    if standing == "baseline-leads":
        if others == 0:
            return f"Only the baseline {leader} was measured: there is nothing to compare it with."
        if not tied:
            return f"The baseline {leader} is fastest: no candidate beat it."
        return f"No candidate beat the baseline {leader}: it leads, but is {apart}."
    if standing == "no-baseline":
        head = f"{leader} is fastest" if not tied else f"{leader} leads, but is {apart}"
        return (
            f"{head}; no speedup is given because the baseline {baseline} is out ({baseline_out})."
        )
    if standing == "clear":
        assert gain is not None
        return f"{leader} is fastest: {_fmt(gain)} over the baseline {baseline}."
    if standing == "leads":
        assert gain is not None
        return f"{leader} leads, but is {apart}; it is {_fmt(gain)} over the baseline {baseline}."
    # baseline-tied: the leader is not separated from the baseline.
    if not baseline_eligible:
        head = f"No candidate within the constraints beat the baseline {baseline} (beyond them)"
        return f"{head}: {leader} leads the eligible ones" + (f", {apart}." if tied else ".")
    rest = [t for t in tied if t != baseline]
    if others > 1 and len(tied) == others:
        return (
            f"No candidate beat the baseline {baseline}: none of the {others + 1} candidates "
            f"is separated from the leader {leader}."
        )
    also = f" or from {_names(rest)}" if rest else ""
    return (
        f"No candidate beat the baseline {baseline}: the leader {leader} is not yet separated "
        f"from it{also}."
    )


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
    beyond = "; ".join(f"{k}: {v}" for k, v in excluded.items())
    eligible = [m for m in measured if m.id not in excluded]
    prefix = f"Batch {batch_size} ({objective}): "
    if not eligible:
        if measured:
            head = "No candidate meets the constraints."
            points = [f"Beyond them: {beyond}."]
        else:
            head = "No candidate completed with acceptable quality."
            points = [f"{k}: {v}." for k, v in (not_ok or {}).items()] or ["No candidates."]
        return Verdict(
            batch_size,
            objective,
            None,
            baseline_id,
            None,
            [],
            [],
            prefix + " ".join([head, *points]),
            dict(excluded),
            standing="none",
            headline=head,
            points=points,
            margin=margin,
        )
    ranked = sorted(eligible, key=lambda m: score(m, objective), reverse=True)
    winner = ranked[0]
    ranking = [m.id for m in ranked]
    by_id = {m.id: m for m in measured}
    base = by_id.get(baseline_id) if baseline_id else None
    base_eligible = base is not None and base.id not in excluded
    # The baseline beyond the constraints is compared too, as one more comparison.
    compared = ranked[1:] + ([base] if base is not None and not base_eligible else [])
    level = comparison_level(len(compared) + 1)
    comparisons = []
    for m in compared:
        j = judge(m, winner, objective, level, margin)
        pairs = process_pair_ratios(m, winner, objective)
        why = (
            ""
            if j.decision == "faster"
            else _why_tied(m, objective, min_rounds, j, margin, len(pairs))
        )
        comparisons.append(Comparison(m.id, j, level, pairs, why, m.id not in excluded))
    tied = [c.id for c in comparisons if c.eligible and c.judged.decision != "faster"]
    gain = speedup(base, winner, objective) if base is not None else None
    vs_base = next((c for c in comparisons if base is not None and c.id == base.id), None)
    if base is None:
        standing = "no-baseline"
    elif base.id == winner.id:
        standing = "baseline-leads"
    elif vs_base is not None and vs_base.judged.decision == "faster":
        standing = "leads" if tied else "clear"
    else:
        standing = "baseline-tied"
    out_why = (not_ok or {}).get(baseline_id or "", "it was not measured")
    head = headline(
        standing,
        winner.id,
        baseline_id,
        tied,
        gain,
        len(ranked) - 1,
        out_why,
        base_eligible,
    )
    points = []
    leader = winner.id
    for c in comparisons:
        if c.eligible and c.why_tied:
            iv = c.judged.ratio
            who = "the baseline " + c.id if c.id == baseline_id else c.id
            points.append(
                f"{who} is not separated from {leader}, which measured {iv.value:.2f}× as fast "
                f"(CI {iv.lo:.2f}–{iv.hi:.2f}): {c.why_tied}."
            )
    if tied and standing in ("baseline-leads", "baseline-tied"):
        points.append(
            "On speed alone nothing here pays for leaving the baseline; memory, cold start "
            "or quality may still favour another candidate."
        )
    elif tied:
        points.append(f"Pick among {_names([leader, *tied])} by memory, cold start or quality.")
    if excluded:
        points.append(f"Not eligible, beyond the constraints: {beyond}.")
    label = "p50 latency" if objective == "latency" else "throughput"
    details = [
        f"Objective: {label}. Each comparison is the paired ratio of the leader over a "
        f"candidate, with a {level:.1%} CI (Bonferroni-corrected for {len(compared)} "
        f"comparison{'s' if len(compared) != 1 else ''}) against a {margin:.0%} equivalence "
        f"margin; a gap whose CI stays under {CLOSE_CALL:.0%} counts only when "
        f"{CLOSE_CALL_PROCESSES} pairs of worker processes, each with {MIN_PAIR_ROUNDS}+ "
        "rounds, show it on their own."
    ]
    for c in comparisons:
        iv = c.judged.ratio
        seen = ", ".join(f"{r:.3f}" for r in c.pair_ratios) or "none with enough rounds"
        details.append(
            f"{leader} vs {c.id}{'' if c.eligible else ' (beyond the constraints)'}: "
            f"{iv.value:.3f}× (CI {iv.lo:.3f}–{iv.hi:.3f}): {c.judged.decision}; "
            f"per process pair: {seen}."
        )
    if gain is not None and base is not None and base.id != leader:
        details.append(
            f"{leader} over the baseline {base.id}: {gain.value:.3f}× "
            f"(95% CI {gain.lo:.3f}–{gain.hi:.3f}, not corrected)."
        )
    ties = [[leader, *tied]] if tied else []
    return Verdict(
        batch_size,
        objective,
        leader,
        baseline_id,
        gain,
        ranking,
        ties,
        prefix + " ".join([head, *points]),
        dict(excluded),
        standing=standing,
        headline=head,
        points=points,
        details=details,
        comparisons=[c.to_dict() for c in comparisons],
        level=level,
        margin=margin,
    )


def statement(v: dict) -> tuple[str, list[str], list[str]]:
    """A verdict's words as every report shows them: the first sentence, the short
    list (ties and close calls with their reason, constraints, caveats) and the
    full statistics. Runs stored before verdicts had a headline give their reason."""
    if not v.get("headline"):
        return str(v.get("reason", "")), [], []
    return str(v["headline"]), list(v.get("points") or []), list(v.get("details") or [])


# What each [constraints] key limits in a candidate's document: label, unit, value, CI.
def _constrained(doc: dict, key: str) -> tuple[str, str, float | None, list[float] | None]:
    lat = doc.get("latency_ms") or {}
    cold = doc.get("cold_start_s") or {}
    if key in ("max_p50_ms", "max_p99_ms"):
        q = key[4:7]
        ci = (lat.get("ci95") or {}).get(q)
        return q, "ms", lat.get(q), ci
    if key == "max_peak_memory_mb":
        return "peak memory", "MB", doc.get("peak_rss_mb"), None
    if key == "max_model_size_mb":
        return "model size", "MB", doc.get("model_size_mb"), None
    load, first = cold.get("load"), cold.get("first_call")
    total = None if load is None or first is None else load + first
    return "cold start (load + first call)", "s", total, None


@dataclass(frozen=True)
class Breach:
    """One limit a candidate's figures break."""

    words: str
    # False where another run could land within the limit: the CI reaches back
    # across it, or the statistic has too few samples behind it (a p99 needs hundreds).
    certain: bool
    measured: bool = True


def breaches(doc: dict, limits: Mapping[str, float | None]) -> list[Breach]:
    """The limits a candidate's document breaks. Point estimates decide."""
    out = []
    unsupported = set((doc.get("latency_ms") or {}).get("unsupported") or [])
    for key, limit in limits.items():
        if limit is None:
            continue
        label, unit, value, ci = _constrained(doc, key)
        if value is None:
            words = f"{label} was not measured, so {key} = {limit:g} cannot be checked"
            out.append(Breach(words, certain=False, measured=False))
        elif value > limit:
            reaches_back = ci is not None and ci[0] <= limit
            close = (
                f" (its 95% CI {ci[0]:.3g}-{ci[1]:.3g} reaches below)"
                if ci and reaches_back
                else ""
            )
            certain = not reaches_back and label not in unsupported
            out.append(Breach(f"{label} {value:.3g} {unit} > {key} = {limit:g}{close}", certain))
    return out


def constraint_violations(doc: dict, limits: Mapping[str, float | None]) -> list[str]:
    """The limits a measured candidate's document breaks, in words.

    Point estimates decide; where a CI straddles the limit that is said, since
    another run could land on the other side of it. A figure that was not
    measured counts as a limit not met.
    """
    return [b.words for b in breaches(doc, limits)]
