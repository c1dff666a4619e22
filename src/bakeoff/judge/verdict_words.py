"""The verdict in words: its first sentence (`headline`), the short list under it
(`points`), the statistics behind it (`details`), and how every report reads a
stored verdict's words back (`statement`).

Text only: what each sentence says was settled by `verdict.decide`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from bakeoff.judge.stats import Interval
from bakeoff.judge.thresholds import CLOSE_CALL, CLOSE_CALL_PROCESSES, MIN_PAIR_ROUNDS

if TYPE_CHECKING:
    from bakeoff.judge.comparison import Comparison


def _fmt(iv: Interval) -> str:
    return f"{iv.value:.2f}× (CI {iv.lo:.2f}–{iv.hi:.2f})"


def names(ids: list[str]) -> str:
    """ "a", "a and b", "a, b and c"; beyond four, "a, b, c and 3 others"."""
    if len(ids) > 4:
        return f"{', '.join(ids[:3])} and {len(ids) - 3} others"
    return ids[0] if len(ids) == 1 else f"{', '.join(ids[:-1])} and {ids[-1]}"


def beyond_constraints(excluded: Mapping[str, str]) -> str:
    """The candidates beyond the workload's constraints, each with why, in one line."""
    return "; ".join(f"{k}: {v}" for k, v in excluded.items())


def no_leader(
    measured: bool, excluded: Mapping[str, str], not_ok: Mapping[str, str]
) -> tuple[str, list[str]]:
    """The first sentence and points of a verdict without an eligible candidate;
    `measured`: whether any candidate was measured (all beyond the constraints)."""
    if measured:
        return "No candidate meets the constraints.", [
            f"Beyond them: {beyond_constraints(excluded)}."
        ]
    points = [f"{k}: {v}." for k, v in not_ok.items()] or ["No candidates."]
    return "No candidate completed with acceptable quality.", points


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
    apart = f"not yet separated from {names(tied)}" if tied else ""
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
    return _baseline_tied(leader, baseline, tied, others, apart, baseline_eligible)


def _baseline_tied(
    leader: str, baseline: str | None, tied: list[str], others: int, apart: str, eligible: bool
) -> str:
    """The first sentence when the leader is not separated from the baseline."""
    if not eligible:
        head = f"No candidate within the constraints beat the baseline {baseline} (beyond them)"
        return f"{head}: {leader} leads the eligible ones" + (f", {apart}." if tied else ".")
    rest = [t for t in tied if t != baseline]
    if others > 1 and len(tied) == others:
        return (
            f"No candidate beat the baseline {baseline}: none of the {others + 1} candidates "
            f"is separated from the leader {leader}."
        )
    also = f" or from {names(rest)}" if rest else ""
    return (
        f"No candidate beat the baseline {baseline}: the leader {leader} is not yet separated "
        f"from it{also}."
    )


def points(
    leader: str,
    baseline: str | None,
    standing: str,
    comparisons: Sequence[Comparison],
    tied: list[str],
    excluded: Mapping[str, str],
) -> list[str]:
    """The short list under the first sentence: each candidate not separated from
    the leader with why, what to pick among them by, and who is beyond the constraints."""
    out = []
    for c in comparisons:
        if c.eligible and c.why_tied:
            iv = c.judged.ratio
            who = "the baseline " + c.id if c.id == baseline else c.id
            out.append(
                f"{who} is not separated from {leader}, which measured {iv.value:.2f}× as fast "
                f"(CI {iv.lo:.2f}–{iv.hi:.2f}): {c.why_tied}."
            )
    if tied and standing in ("baseline-leads", "baseline-tied"):
        out.append(
            "On speed alone nothing here pays for leaving the baseline; memory, cold start "
            "or quality may still favour another candidate."
        )
    elif tied:
        out.append(f"Pick among {names([leader, *tied])} by memory, cold start or quality.")
    if excluded:
        out.append(f"Not eligible, beyond the constraints: {beyond_constraints(excluded)}.")
    return out


def details(
    objective: str,
    level: float,
    margin: float,
    leader: str,
    comparisons: Sequence[Comparison],
    baseline: str | None,
    gain: Interval | None,
) -> list[str]:
    """The statistics behind the verdict: the method in one sentence, then each
    comparison with its CI and per-process-pair ratios, then the speedup over the
    baseline (`gain`, when one was measured)."""
    label = "p50 latency" if objective == "latency" else "throughput"
    n = len(comparisons)
    out = [
        f"Objective: {label}. Each comparison is the paired ratio of the leader over a "
        f"candidate, with a {level:.1%} CI (Bonferroni-corrected for {n} "
        f"comparison{'s' if n != 1 else ''}) against a {margin:.0%} equivalence "
        f"margin; a gap whose CI stays under {CLOSE_CALL:.0%} counts only when "
        f"{CLOSE_CALL_PROCESSES} pairs of worker processes, each with {MIN_PAIR_ROUNDS}+ "
        "rounds, show it on their own."
    ]
    for c in comparisons:
        iv = c.judged.ratio
        seen = ", ".join(f"{r:.3f}" for r in c.pair_ratios) or "none with enough rounds"
        out.append(
            f"{leader} vs {c.id}{'' if c.eligible else ' (beyond the constraints)'}: "
            f"{iv.value:.3f}× (CI {iv.lo:.3f}–{iv.hi:.3f}): {c.judged.decision}; "
            f"per process pair: {seen}."
        )
    if gain is not None and baseline != leader:
        out.append(
            f"{leader} over the baseline {baseline}: {gain.value:.3f}× "
            f"(95% CI {gain.lo:.3f}–{gain.hi:.3f}, not corrected)."
        )
    return out


def statement(v: dict) -> tuple[str, list[str], list[str]]:
    """A verdict's words as every report shows them: the first sentence, the short
    list (ties and close calls with their reason, constraints, caveats) and the
    full statistics. Runs stored before verdicts had a headline give their reason."""
    if not v.get("headline"):
        return str(v.get("reason", "")), [], []
    return str(v["headline"]), list(v.get("points") or []), list(v.get("details") or [])


def pick_quality(v: dict, candidates: Sequence[Mapping]) -> str | None:
    """The pick's quality against the gate, for the verdict's first lines: a speed-up
    means little until it is known what it cost. The pick is the recommendation
    among tied leaders where there is one, else the winner."""
    pick = v.get("recommended") or v.get("winner")
    c = next((c for c in candidates if c["id"] == pick), None)
    q = c and c.get("quality")
    if not q or q.get("drop") is None:
        return None
    return (
        f"Quality of {pick}: {q['metric']} {q['value']:.4f} against the reference's "
        f"{q['reference']:.4f}, a drop of {q['drop']:.4f} within the gate "
        f"(max_drop {q['max_drop']:g})."
    )
