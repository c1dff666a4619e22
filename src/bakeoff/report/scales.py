"""The charts' scales: the quality grid and axis, and how an axis is ticked.

The quality helpers need nothing and are used by the HTML report too, to
compute the Pareto front on the grid the chart draws. `plain_numbers` is handed
a matplotlib axes (matplotlib is imported only by whoever drew one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# Upper and lower bounds of each quality metric (see judge/quality.py), and which way is better.
_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "cosine": (-1.0, 1.0),
    "agreement": (0.0, 1.0),
    "accuracy": (0.0, 1.0),
    "max_abs": (0.0, None),
}


def lower_is_better(metric: str) -> bool:
    """max_abs is a distance from the reference; the other metrics are agreements."""
    return metric == "max_abs"


def quality_resolution(metric: str, max_drop: float | None, values: Sequence[float]) -> float:
    """The smallest quality difference the gate itself tells apart: its max_drop,
    or, where there is none (or it is 0), a thousandth of the metric's scale."""
    if max_drop is not None and math.isfinite(max_drop) and max_drop > 0:
        return float(max_drop)
    scale = 1.0
    if lower_is_better(metric):
        scale = max((abs(v) for v in values if math.isfinite(v)), default=0.0) or 1.0
    return 0.001 * scale


def snap(value: float, resolution: float) -> float:
    """`value` on a grid of resolution/100: fine enough for any difference the gate
    can see, coarse enough that float noise (0.99999994 against 1.0) is one value."""
    step = resolution / 100
    return round(value / step) * step


def quality_limits(
    values: Sequence[float], resolution: float, metric: str = ""
) -> tuple[float, float]:
    """The quality axis's data span: the values' own, but never less than
    `resolution`, kept inside the metric's bounds where it can be (a cosine never
    passes 1). The axis itself adds a margin either side."""
    lo, hi = min(values), max(values)
    if hi - lo >= resolution:
        return lo, hi
    mid = (lo + hi) / 2
    a, b = mid - resolution / 2, mid + resolution / 2
    lb, ub = _BOUNDS.get(metric, (None, None))
    if ub is not None and b > ub:
        a, b = a - (b - ub), ub
    if lb is not None and a < lb:
        a, b = lb, b + (lb - a)
    return a, b


def decimals(ticks: Sequence[float], step: float) -> int:
    """The fewest decimals that print every tick distinctly and near its value."""
    for d in range(0, 13):
        labels = [f"{t:.{d}f}" for t in ticks]
        if len(set(labels)) == len(labels) and all(
            abs(float(s) - t) < step * 1e-3 for s, t in zip(labels, ticks, strict=True)
        ):
            return d
    return 12


def plain_numbers(ax: Axes, axis: Literal["x", "y"], log: bool) -> None:
    """Tick labels as plain numbers: no offset ("1e-7+1"), no 10^k on log axes."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.xaxis if axis == "x" else ax.yaxis
    if log:
        target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}" if v >= 1 else f"{v:g}"))
        target.set_minor_formatter(NullFormatter())
    else:
        ax.ticklabel_format(axis=axis, style="plain", useOffset=False)


def log_worth_it(values: Sequence[float]) -> bool:
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > 20
