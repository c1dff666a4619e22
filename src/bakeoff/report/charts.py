"""The HTML report's charts: matplotlib's SVG backend, inlined in the page.

One builder per kind of chart (`boxes`, `lines`, `bars`, `curves`; the quality
against speed scatter is in scatter.py), each taking
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
                tip = f"{s.label} at {x:g}: {num(y)}{ci_text}"
                svg.point(ax, marks, "point", tip, pos[x], y, marker="o", markersize=7, color=c)
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


def estimate_bar(cand: dict[str, Any], key: str, color: str) -> Bar:
    """The bar of a stored candidate's estimate `key` ({"value", "ci95": [lo, hi]}):
    its value, with its 95% CI as the whisker."""
    return Bar(cand["id"], cand[key]["value"], tuple(cand[key]["ci95"]), color=color)


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
