"""The workload's [constraints] judged on a candidate's measured figures.

A candidate beyond a limit cannot win (docs/method.md §5). The figures are typed
(`Figures`), computed from the measurements themselves by whoever holds them, so
the judge never has to read the result document's format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One constrained figure: its value (None: not measured) and 95% CI if it has one."""

    value: float | None
    ci: tuple[float, float] | None = None
    # Too few samples behind it for the statistic (a p99 needs hundreds): another
    # run could land on the other side of a limit even without a CI reaching back.
    unsupported: bool = False


@dataclass(frozen=True)
class Figures:
    """What each [constraints] key limits, for one candidate."""

    p50_ms: Figure
    p99_ms: Figure
    peak_memory_mb: Figure
    model_size_mb: Figure
    cold_start_s: Figure  # load + first call


# Each [constraints] key: the figure it limits, its label in words and its unit.
LIMITED = {
    "max_p50_ms": ("p50_ms", "p50", "ms"),
    "max_p99_ms": ("p99_ms", "p99", "ms"),
    "max_peak_memory_mb": ("peak_memory_mb", "peak memory", "MB"),
    "max_model_size_mb": ("model_size_mb", "model size", "MB"),
    "max_cold_start_s": ("cold_start_s", "cold start (load + first call)", "s"),
}


@dataclass(frozen=True)
class Breach:
    """One limit a candidate's figures break."""

    words: str
    # False where another run could land within the limit: the CI reaches back
    # across it, or the statistic has too few samples behind it.
    certain: bool
    measured: bool = True


def breaches(figures: Figures, limits: Mapping[str, float | None]) -> list[Breach]:
    """The limits a candidate's figures break. Point estimates decide."""
    out = []
    for key, limit in limits.items():
        if limit is None:
            continue
        name, label, unit = LIMITED[key]
        figure: Figure = getattr(figures, name)
        value, ci = figure.value, figure.ci
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
            certain = not reaches_back and not figure.unsupported
            out.append(Breach(f"{label} {value:.3g} {unit} > {key} = {limit:g}{close}", certain))
    return out


def constraint_violations(figures: Figures, limits: Mapping[str, float | None]) -> list[str]:
    """The limits a measured candidate breaks, in words.

    Point estimates decide; where a CI straddles the limit that is said, since
    another run could land on the other side of it. A figure that was not
    measured counts as a limit not met.
    """
    return [b.words for b in breaches(figures, limits)]
