"""Naming a winner per batch size, honestly.

The objective is p50 latency at batch 1 and measured throughput above it,
unless the workload says otherwise. "A beats B" needs the paired ratio's 95%
CI to exclude 1; otherwise the two are reported as tied, with why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from bakeoff.measure import stats
from bakeoff.measure.stats import Interval


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
    batch_size: int
    objective: str
    winner: str | None
    baseline: str | None
    speedup: Interval | None
    ranking: list[str]
    ties: list[list[str]] = field(default_factory=list)
    reason: str = ""
    # Measured candidates beyond the workload's [constraints]: id -> why; not ranked.
    excluded: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.winner is not None and self.winner not in self.ranking:
            raise ValueError("the winner must be ranked")
        if not self.reason:
            raise ValueError("a verdict needs a reason in words")

    def to_dict(self) -> dict:
        return {
            "batch_size": self.batch_size,
            "objective": self.objective,
            "winner": self.winner,
            "baseline": self.baseline,
            "speedup": None
            if self.speedup is None
            else {"value": self.speedup.value, "ci95": [self.speedup.lo, self.speedup.hi]},
            "ranking": self.ranking,
            "ties": self.ties,
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
    return f"{iv.value:.2f}x (CI {iv.lo:.2f}-{iv.hi:.2f})"


def _why_tied(m: Measured, objective: str, min_rounds: int, judged: Judgement) -> str:
    if judged.why:
        return judged.why
    rounds = len(m.block_ns)
    cv = stats.round_to_round_cv(m.samples_ns, m.block_ns, objective)
    if rounds < min_rounds:
        return f"only {rounds} rounds"
    if cv > NOISY_CV:
        return f"round-to-round spread {cv:.0%}"
    return "the difference is within the noise"


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

    A candidate is tied with the winner unless the winner is faster by more than
    the equivalence margin with the Bonferroni-corrected CI of the paired ratio.
    Candidates in `excluded` (beyond the workload's constraints) are measured but
    neither ranked nor eligible; one may still be the baseline a speedup is over.
    """
    label = "p50 latency" if objective == "latency" else "throughput"
    excluded = excluded or {}
    beyond = "; ".join(f"{k}: {v}" for k, v in excluded.items())
    eligible = [m for m in measured if m.id not in excluded]
    if not eligible:
        if measured:
            reason = (
                f"No candidate meets the constraints at batch {batch_size} (beyond them: {beyond})."
            )
        else:
            why = "; ".join(f"{k}: {v}" for k, v in (not_ok or {}).items()) or "no candidates"
            reason = (
                f"No candidate completed with acceptable quality at batch {batch_size} ({why})."
            )
        return Verdict(
            batch_size, objective, None, baseline_id, None, [], [], reason, dict(excluded)
        )
    ranked = sorted(eligible, key=lambda m: score(m, objective), reverse=True)
    winner = ranked[0]
    ranking = [m.id for m in ranked]
    level = comparison_level(len(ranked))
    judged = {m.id: judge(m, winner, objective, level, margin) for m in ranked[1:]}
    vs_winner = {mid: j.ratio for mid, j in judged.items()}
    tied = [mid for mid, j in judged.items() if j.decision != "faster"]
    by_id = {m.id: m for m in measured}
    base = by_id.get(baseline_id) if baseline_id else None
    gain = speedup(base, winner, objective) if base is not None else None

    parts = [f"At batch {batch_size}, {winner.id} has the best {label}"]
    if gain is not None and base is not None and base.id != winner.id:
        parts[0] += (
            f": {gain.value:.2f}x (95% CI {gain.lo:.2f}-{gain.hi:.2f}) over the baseline {base.id}."
        )
    elif base is not None:
        parts[0] += "; it is the baseline itself, so nothing measured beat it."
    else:
        why = (not_ok or {}).get(baseline_id or "", "it was not measured")
        parts[0] += f"; no speedup is given because the baseline {baseline_id} is out ({why})."
    if tied:

        def detail(ids: list[str]) -> str:
            why = {t: _why_tied(by_id[t], objective, min_rounds, judged[t]) for t in ids}
            return ", ".join(f"{t} ({_fmt(vs_winner[t])}; {why[t]})" for t in ids)

        # A close call held back by the process rule has a CI that does clear the
        # margin, so the CI sentence would be false for it: it gets its own.
        within = [t for t in tied if not judged[t].why]
        held = [t for t in tied if judged[t].why]
        if within:
            parts.append(
                f"Tied with {detail(within)}: the {level:.1%} CI of the paired ratio "
                f"(corrected for {len(ranked) - 1} comparisons) does not put the winner more "
                f"than {margin:.0%} ahead."
            )
        if held:
            parts.append(
                f"Tied with {detail(held)}: the {level:.1%} CI clears the {margin:.0%} margin "
                f"but not {CLOSE_CALL:.0%}, and a gap that close counts only when "
                f"{CLOSE_CALL_PROCESSES} pairs of worker processes each show it."
            )
        parts.append("Pick among the tied by memory, cold start or quality.")
    if excluded:
        parts.append(f"Not eligible, beyond the constraints: {beyond}.")
    ties = [[winner.id, *tied]] if tied else []
    return Verdict(
        batch_size,
        objective,
        winner.id,
        baseline_id,
        gain,
        ranking,
        ties,
        " ".join(parts),
        dict(excluded),
    )


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
