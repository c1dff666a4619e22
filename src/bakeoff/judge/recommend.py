"""Which of the candidates speed cannot separate a careful engineer would take.

When the leader is not separated from others, the speed statistics alone cannot
name one; the recommendation takes, among the leader and those tied with it, the
one that keeps the most quality, then the one that needs the least memory, then
the one that starts fastest. Each step keeps every candidate within a small
tolerance of the best, so a difference in the noise of a figure never decides.
The statistics stay as they are: `winner` is still the best point estimate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from bakeoff.judge import verdict_words as words
from bakeoff.judge.verdict import Verdict

# Quality drops this close count as equal: two FP32 runtimes differ by about 1e-6
# in cosine, so only a drop that a precision change brings (BF16 ~1e-5, INT8 ~1e-3)
# separates them.
QUALITY_TOLERANCE = 1e-4
# Peak memory within 5% (and 2 MB) of the smallest counts as equal: the resident
# set of one process varies by about that between runs.
MEMORY_TOLERANCE = 0.05
MEMORY_TOLERANCE_MB = 2.0
# Cold starts within 10% of the fastest count as equal.
COLD_START_TOLERANCE = 0.10

RULE = "the smallest quality drop, then the smaller peak memory, then the faster cold start"


@dataclass(frozen=True)
class Traits:
    """What the recommendation compares, besides speed; None where not measured."""

    quality_drop: float | None = None
    peak_memory_mb: float | None = None
    cold_start_s: float | None = None


@dataclass(frozen=True)
class _Step:
    name: str
    value: Callable[[Traits], float | None]
    near: Callable[[float, float], bool]  # (value, best) -> within tolerance of best
    say: Callable[[float], str]


_STEPS = (
    _Step(
        "quality drop",
        lambda t: t.quality_drop,
        lambda v, best: v <= best + QUALITY_TOLERANCE,
        lambda v: f"{v:.2g}",
    ),
    _Step(
        "peak memory",
        lambda t: t.peak_memory_mb,
        lambda v, best: v <= max(best * (1 + MEMORY_TOLERANCE), best + MEMORY_TOLERANCE_MB),
        lambda v: f"{v:.0f} MiB",
    ),
    _Step(
        "cold start",
        lambda t: t.cold_start_s,
        lambda v, best: v <= best * (1 + COLD_START_TOLERANCE),
        lambda v: f"{v:.2g} s",
    ),
)


def pick(tied: list[str], traits: Mapping[str, Traits]) -> tuple[str, str]:
    """The recommended id among `tied` (in ranking order) and what decided it, in words.

    Each step in turn keeps the candidates near the best on its figure; one not
    measured on a figure is kept (it is not known to be worse). The fastest of those
    left is recommended; the steps that narrowed the field are the reason.
    """
    field, reasons = list(tied), []
    for step in _STEPS:
        known = {i: step.value(traits.get(i, Traits())) for i in field}
        values = {i: v for i, v in known.items() if v is not None}
        if len(values) < 2:
            continue
        best = min(values.values())
        kept = [i for i in field if (v := known[i]) is None or step.near(v, best)]
        if len(kept) == len(field):
            continue
        dropped = ", ".join(f"{i} {step.say(values[i])}" for i in field if i not in kept)
        shown = ", ".join(f"{i} {step.say(values[i])}" for i in kept if i in values)
        reasons.append(f"{step.name} {shown} against {dropped}")
        field = kept
    if not reasons:
        return tied[0], "alike in quality, memory and cold start: the fastest point estimate"
    return field[0], "; ".join(reasons)


def recommend(verdict: Verdict, traits: Mapping[str, Traits]) -> Verdict:
    """The verdict with `recommended` set: the winner when it is separated from every
    other eligible candidate; otherwise `pick` among the winner and those tied with it,
    said as one more point."""
    if verdict.winner is None:
        return verdict
    if not verdict.ties:
        return dataclasses.replace(verdict, recommended=verdict.winner)
    tied = verdict.ties[0]
    choice, why = pick(tied, traits)
    point = (
        f"Speed alone does not separate {words.names(tied)}; recommended: {choice}, "
        f"by {RULE} ({why})."
    )
    return dataclasses.replace(verdict.with_caveat(point), recommended=choice, recommendation=point)
