"""The report's quality-against-speed chart: each candidate's quality (y) against its
speed (x), the Pareto front, the winner ringed, and the quality gate with what it
rejected. Built on `charts` (palette, numbers) and drawn like the others there.

matplotlib is imported inside the drawing functions: only `bakeoff report` needs it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from bakeoff.report import scales, svg
from bakeoff.report.charts import FRONT, GATE, WINNER, color, num

if TYPE_CHECKING:
    from matplotlib.axes import Axes


@dataclass(frozen=True)
class Point:
    label: str
    x: float
    y: float  # as drawn: on the quality grid (see scales.snap)
    x_ci: tuple[float, float] | None = None
    winner: bool = False
    on_front: bool = False
    color: str = ""
    y_measured: float | None = None  # before snapping, for the hover text
    # How the ringed leader is named: "winner", or that it leads without being
    # separated from the others (the verdict's standing).
    winner_word: str = "winner"


def scatter(
    chart_id: str,
    title: str,
    points: list[Point],
    x_label: str,
    y_label: str,
    *,
    resolution: float,
    lower_x: bool = True,
    metric: str = "",
    gate: float | None = None,
    rejected: Sequence[tuple[str, float]] = (),
) -> str:
    """Quality (y) against speed (x), the Pareto front as a dashed step line, the
    winner ringed and named. The quality axis spans at least `resolution`. With
    `gate`, the quality gate as a dotted line, and the `rejected` candidates (label,
    quality) beyond it as crosses at the left edge: the gate stopped them before they
    were timed, so they have a quality and no speed.

    Points are named in a legend below the plot (labels beside the points would
    overlap, since many variants share one quality); the winner is also named inline.
    """
    legend_rows = (len(points) + 1) // 2
    with svg.figure(chart_id, 330 + 17 * legend_rows) as (fig, ax, marks):
        _speed_axis(ax, points)
        extra = [q for _, q in rejected] + ([gate] if gate is not None else [])
        tip_d = _quality_axis(ax, points, resolution, metric, extra)
        _front_line(ax, marks, points, lower_x)
        handles: list[Any] = []
        labels: list[str] = []
        for i, p in enumerate(points):
            tip = _tip(p, x_label, y_label, tip_d)
            handle = _draw_point(ax, marks, p, p.color or color(i), tip)
            mark = f" ({p.winner_word})" if p.winner else (" (Pareto front)" if p.on_front else "")
            handles.append(handle)
            labels.append(p.label + mark)
        _gate_and_rejected(ax, marks, gate, rejected, handles, labels)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        fig.legend(handles, labels, loc="outside lower center", ncols=2)
        _name_winner(ax, points)
        return svg.to_svg(fig, chart_id, title, marks)


def _speed_axis(ax: Axes, points: list[Point]) -> None:
    """The x axis: logarithmic where the speeds (and their CIs) span a wide range."""
    xs = [p.x for p in points] + [v for p in points if p.x_ci for v in p.x_ci]
    log_x = scales.log_worth_it(xs)
    if log_x:
        ax.set_xscale("log")
    scales.plain_numbers(ax, "x", log_x)


def _gate_and_rejected(
    ax: Axes,
    marks: svg.Marks,
    gate: float | None,
    rejected: Sequence[tuple[str, float]],
    handles: list[Any],
    labels: list[str],
) -> None:
    from matplotlib.lines import Line2D

    if gate is not None:
        ax.axhline(
            gate,
            color=GATE,
            linestyle=":",
            linewidth=1.4,
            zorder=1,
            clip_on=False,  # no clip path: the page refers to nothing by url()
            gid=marks.add("gate", f"the quality gate: {num(gate)}"),
        )
        handles.append(Line2D([], [], color=GATE, linestyle=":", linewidth=1.4))
        labels.append("the quality gate")
    left = ax.get_xlim()
    for label, q in rejected:
        tip = f"{label}: rejected by the quality gate at {num(q)}"
        svg.point(ax, marks, "rejected", tip, left[0], q, marker="X", markersize=9, color=GATE)
        handles.append(Line2D([], [], marker="X", linestyle="none", color=GATE, markersize=9))
        labels.append(f"{label} (rejected by the gate, not timed)")
    ax.set_xlim(left)  # the crosses sit on the edge; they do not move it


def _quality_axis(
    ax: Axes, points: list[Point], resolution: float, metric: str, extra: Sequence[float] = ()
) -> int:
    """The y axis over at least `resolution` of quality (and the `extra` values: the
    gate, the rejected), ticked with the fewest decimals that tell its ticks apart;
    returns the decimals for the hover text."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

    lo, hi = scales.quality_limits([p.y for p in points] + list(extra), resolution, metric)
    pad = (hi - lo) * 0.1
    ax.set_ylim(lo - pad, hi + pad)
    ticks = [
        t
        for t in MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
        if lo - (hi - lo) * 1e-6 <= t <= hi + (hi - lo) * 1e-6
    ]
    step = ticks[1] - ticks[0] if len(ticks) > 1 else hi - lo
    d = scales.decimals(ticks, step)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.{d}f}"))
    # Hover values to the grid's step (they are snapped to it), at least.
    return max(d, math.ceil(-math.log10(resolution / 100) - 1e-9))


def _front_line(ax: Axes, marks: svg.Marks, points: list[Point], lower_x: bool) -> None:
    """The Pareto front as a dashed step line, when it has more than one point."""
    front = sorted((p for p in points if p.on_front), key=lambda p: p.x)
    if len(front) <= 1:
        return
    # Each speed is worth the best quality of any front point at least as
    # fast: the line steps at the next front point.
    where: Literal["pre", "post"] = "post" if lower_x else "pre"
    names = ", ".join(p.label for p in front)
    ax.step(
        [p.x for p in front],
        [p.y for p in front],
        where=where,
        color=FRONT,
        linewidth=1.6,
        linestyle=(0, (5, 3)),
        zorder=2.5,
        clip_on=False,
        gid=marks.add("pareto-front", f"Pareto front: {names}"),
    )


def _tip(p: Point, x_label: str, y_label: str, tip_d: int) -> str:
    """A point's hover text: its label and both values (quality as measured, too,
    where the grid moved it)."""
    measured = ""
    if p.y_measured is not None and p.y_measured != p.y:
        measured = f" (measured {p.y_measured:.8g})"
    return f"{p.label}: {x_label} {num(p.x)}, {y_label} {p.y:.{tip_d}f}{measured}"


def _draw_point(ax: Axes, marks: svg.Marks, p: Point, c: str, tip: str) -> Any:
    """One candidate: its CI bar, the point (outlined on the front) and, for the
    winner, a ring. Returns the legend's handle for it."""
    from matplotlib.lines import Line2D

    if p.x_ci:
        ax.hlines(
            p.y,
            p.x_ci[0],
            p.x_ci[1],
            colors=c,
            linewidth=1.5,
            zorder=2,
            clip_on=False,
            gid=marks.add("ci", f"{p.label}: 95% CI {num(p.x_ci[0])}–{num(p.x_ci[1])}"),
        )
    cls = "point" + (" winner" if p.winner else "") + (" front" if p.on_front else "")
    style: dict[str, Any] = (
        {"markeredgecolor": "#222222", "markeredgewidth": 1.6, "markersize": 10}
        if p.on_front
        else {"markeredgecolor": c, "markeredgewidth": 1.0, "markersize": 8}
    )
    svg.point(ax, marks, cls, tip, p.x, p.y, marker="o", color=c, **style)
    if p.winner:
        svg.point(
            ax,
            marks,
            "winner-ring",
            f"{p.winner_word}: {p.label}",
            p.x,
            p.y,
            zorder=4,
            marker="o",
            markersize=19,
            markerfacecolor="none",
            markeredgecolor=WINNER,
            markeredgewidth=2,
        )
    return Line2D([], [], marker="o", linestyle="none", color=c, **style)


def _name_winner(ax: Axes, points: list[Point]) -> None:
    """The winner named beside its ring, on the side with room, so the label stays
    over the plot."""
    winner = next((p for p in points if p.winner), None)
    if winner is None:
        return
    ax.get_xlim()  # settles the autoscaled limits
    left = (ax.transScale + ax.transLimits).transform((winner.x, winner.y))[0] > 0.5
    ax.annotate(
        f"{winner.winner_word}: {winner.label}",
        (winner.x, winner.y),
        xytext=(-12 if left else 12, 12),
        textcoords="offset points",
        ha="right" if left else "left",
        va="bottom",
        fontsize=11,
        zorder=5,
        annotation_clip=False,
    )
