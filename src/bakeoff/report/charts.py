"""The HTML report's charts: matplotlib's SVG backend, inlined in the page.

One builder per kind of chart (`scatter`, `boxes`, `lines`, `bars`), each taking
plain rows and giving an `<svg class="chart" id=...>` (see svg.py for how
matplotlib's SVG is made fit to inline, scales.py for the axes). Every plotted
mark is a group with a class (`point`, `box`, `bar`, `line`, `ci`,
`pareto-front`, `winner-ring`) and a `<title>` that shows its label and values
on hover, so tests can count what was drawn.

matplotlib is imported inside the drawing functions: only `bakeoff report`
needs it. `num` and `color` need nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from bakeoff.report import scales, svg

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
WINNER = "#d62728"
FRONT = "#2ca02c"
# The quality gate's line and the candidates it rejected.
GATE = "#7f7f7f"


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def num(x: float) -> str:
    """Three significant figures, no scientific notation for everyday sizes."""
    if x == 0 or not math.isfinite(x) or not (1e-4 <= abs(x) < 1e7):
        return f"{x:.3g}"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


# ---------------------------------------------------------------- scatter


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
        ax.plot(
            [left[0]],
            [q],
            marker="X",
            markersize=9,
            linestyle="none",
            color=GATE,
            zorder=3,
            clip_on=False,
            gid=marks.add("rejected", f"{label}: rejected by the quality gate at {num(q)}"),
        )
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
    ax.plot(
        [p.x],
        [p.y],
        marker="o",
        linestyle="none",
        color=c,
        zorder=3,
        clip_on=False,
        gid=marks.add(cls, tip),
        **style,
    )
    if p.winner:
        ax.plot(
            [p.x],
            [p.y],
            marker="o",
            markersize=19,
            markerfacecolor="none",
            markeredgecolor=WINNER,
            markeredgewidth=2,
            linestyle="none",
            zorder=4,
            clip_on=False,
            gid=marks.add("winner-ring", f"{p.winner_word}: {p.label}"),
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


# ---------------------------------------------------------------- boxes


@dataclass(frozen=True)
class Box:
    label: str
    p1: float
    p25: float
    p50: float
    p75: float
    p99: float
    n: int
    color: str = ""


def boxes(chart_id: str, title: str, rows: list[Box], x_label: str) -> str:
    """One horizontal box per candidate: whiskers p1-p99, box p25-p75, line at p50."""
    from matplotlib.patches import Rectangle

    with svg.figure(chart_id, 60 + 28 * len(rows)) as (fig, ax, marks):
        log_x = scales.log_worth_it([v for r in rows for v in (r.p1, r.p99)])
        if log_x:
            ax.set_xscale("log")
        scales.plain_numbers(ax, "x", log_x)
        for i, r in enumerate(rows):
            c = r.color or color(i)
            gid = marks.add(
                "box",
                f"{r.label}: p1 {num(r.p1)}, p25 {num(r.p25)}, p50 {num(r.p50)}, "
                f"p75 {num(r.p75)}, p99 {num(r.p99)} ({r.n} samples)",
            )
            ax.hlines(i, r.p1, r.p99, colors=c, linewidth=1.2, clip_on=False, gid=gid)
            ax.add_patch(
                Rectangle(
                    (r.p25, i - 0.3),
                    r.p75 - r.p25,
                    0.6,
                    facecolor=c,
                    alpha=0.35,
                    edgecolor=c,
                    clip_on=False,
                    gid=gid,
                )
            )
            ax.vlines(
                r.p50, i - 0.34, i + 0.34, colors="#000000", linewidth=2, clip_on=False, gid=gid
            )
        ax.set_yticks(range(len(rows)), [r.label for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.grid(False, axis="y")
        ax.set_xlabel(x_label)
        return svg.to_svg(fig, chart_id, title, marks)


# ---------------------------------------------------------------- lines


@dataclass(frozen=True)
class Series:
    label: str
    xs: list[float]
    ys: list[float]
    cis: list[tuple[float, float] | None]
    color: str = ""


def lines(chart_id: str, title: str, series: list[Series], x_label: str, y_label: str) -> str:
    """One line per series with CI bars; x is categorical (batch sizes), evenly spaced."""
    cats = sorted({x for s in series for x in s.xs})
    pos = {c: i for i, c in enumerate(cats)}
    with svg.figure(chart_id, 300 + 17 * ((len(series) + 1) // 2)) as (fig, ax, marks):
        ys = [y for s in series for y in s.ys] + [
            v for s in series for ci in s.cis if ci for v in ci
        ]
        log_y = scales.log_worth_it(ys)
        if log_y:
            ax.set_yscale("log")
        scales.plain_numbers(ax, "y", log_y)
        handles = []
        for i, s in enumerate(series):
            c = s.color or color(i)
            pts = sorted(zip(s.xs, s.ys, s.cis, strict=True))
            (line,) = ax.plot(
                [pos[x] for x, _, _ in pts],
                [y for _, y, _ in pts],
                color=c,
                linewidth=2,
                clip_on=False,
                gid=marks.add("line", s.label) if len(pts) > 1 else None,
                label=s.label,
            )
            handles.append(line)
            for x, y, ci in pts:
                if ci:
                    ax.vlines(
                        pos[x],
                        ci[0],
                        ci[1],
                        colors=c,
                        linewidth=1.5,
                        clip_on=False,
                        gid=marks.add(
                            "ci", f"{s.label} at {x:g}: 95% CI {num(ci[0])}–{num(ci[1])}"
                        ),
                    )
                ci_text = f" [{num(ci[0])}–{num(ci[1])}]" if ci else ""
                ax.plot(
                    [pos[x]],
                    [y],
                    marker="o",
                    markersize=7,
                    linestyle="none",
                    color=c,
                    zorder=3,
                    clip_on=False,
                    gid=marks.add("point", f"{s.label} at {x:g}: {num(y)}{ci_text}"),
                )
        ax.set_xticks(range(len(cats)), [f"{c:g}" for c in cats])
        ax.set_xlim(-0.5, len(cats) - 0.5)
        ax.grid(False, axis="x")
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        fig.legend(handles, [s.label for s in series], loc="outside lower center", ncols=2)
        return svg.to_svg(fig, chart_id, title, marks)


# ---------------------------------------------------------------- bars


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    ci: tuple[float, float] | None = None
    note: str = ""
    color: str = ""


def bars(chart_id: str, title: str, rows: list[Bar], x_label: str) -> str:
    """Horizontal bars from zero, with an optional CI whisker; the value printed at
    the bar's end, the axis stretched so that the longest of those labels fits."""
    with svg.figure(chart_id, 60 + 22 * len(rows)) as (fig, ax, marks):
        scales.plain_numbers(ax, "x", False)
        ends = []
        texts = []
        for i, r in enumerate(rows):
            tip = f"{r.label}: {num(r.value)}"
            if r.ci:
                tip += f" [{num(r.ci[0])}–{num(r.ci[1])}]"
            ax.barh(
                i,
                r.value,
                height=0.64,
                color=r.color or color(i),
                clip_on=False,
                gid=marks.add("bar", tip + r.note),
            )
            if r.ci:
                ax.hlines(
                    i,
                    r.ci[0],
                    r.ci[1],
                    colors="#000000",
                    linewidth=1.2,
                    clip_on=False,
                    gid=marks.add("ci", f"{r.label}: 95% CI {num(r.ci[0])}–{num(r.ci[1])}"),
                )
            end = max(r.value, r.ci[1] if r.ci else 0.0)
            ends.append(end)
            texts.append(
                ax.annotate(
                    num(r.value) + r.note,
                    (end, i),
                    xytext=(4, 0),
                    textcoords="offset points",
                    va="center",
                    ha="left",
                    fontsize=10,
                    annotation_clip=False,
                )
            )
        ax.set_yticks(range(len(rows)), [r.label for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.grid(False, axis="y")
        ax.set_xlabel(x_label)
        _fit_labels(fig, ax, ends, texts)
        return svg.to_svg(fig, chart_id, title, marks)


def _fit_labels(fig: Figure, ax: Axes, ends: list[float], texts: list[Any]) -> None:
    """Stretch the x axis (from 0) until every value label ends inside the axes.

    A label of width w after a bar ending at e fits when e/hi * W + w <= W, W the
    axes' width in px; the layout can move W, so it is measured again each time.
    Where labels would leave the bars under a third of the width, they may pass
    the axes: the figure's tight bounding box still takes them in."""
    hi = max([*ends, 0.0]) * 1.05 or 1.0
    ax.set_xlim(0, hi)
    for _ in range(4):
        fig.draw_without_rendering()
        width = ax.get_window_extent().width
        need = hi
        for end, text in zip(ends, texts, strict=True):
            room = width - text.get_window_extent().width - 6
            need = max(need, end * width / max(room, width / 3))
        if need <= hi * 1.0001:
            return
        hi = need
        ax.set_xlim(0, hi)


# ---------------------------------------------------------------- curves


@dataclass(frozen=True)
class Curve:
    label: str
    xs: list[float]
    ys: list[float]
    color: str = ""
    dashed: bool = False


def curves(
    chart_id: str, title: str, rows: list[Curve], x_label: str, y_label: str, log_y: bool = False
) -> str:
    """Lines over a numeric x (training steps): one mark per curve, its last point in
    the tooltip; values that are not finite (a diverged loss) end the curve there."""
    with svg.figure(chart_id, 300 + 17 * ((len(rows) + 1) // 2)) as (fig, ax, marks):
        if log_y:
            ax.set_yscale("log")
        scales.plain_numbers(ax, "y", log_y)
        handles: list[Any] = []
        labels: list[str] = []
        for i, r in enumerate(rows):
            pts = [(x, y) for x, y in zip(r.xs, r.ys, strict=True) if math.isfinite(y)]
            if log_y:
                pts = [(x, y) for x, y in pts if y > 0]
            if not pts:
                continue
            last_x, last_y = pts[-1]
            (line,) = ax.plot(
                [x for x, _ in pts],
                [y for _, y in pts],
                color=r.color or color(i),
                linewidth=1.6,
                linestyle="--" if r.dashed else "-",
                clip_on=False,
                gid=marks.add("line", f"{r.label}: {num(last_y)} at {num(last_x)}"),
                label=r.label,
            )
            handles.append(line)
            labels.append(r.label)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        if handles:
            fig.legend(handles, labels, loc="outside lower center", ncols=2)
        return svg.to_svg(fig, chart_id, title, marks)
