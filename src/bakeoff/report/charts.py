"""The HTML report's charts: matplotlib's SVG backend, inlined in the page.

The report must open anywhere without a network and without scripts, so each
chart is an SVG drawn by matplotlib (which chooses the ticks, formats the
numbers and lays the labels out so none runs off the chart) and then tidied
here: no XML declaration or DOCTYPE, no namespace declarations, no metadata, no
page-wide `<style>`, no clip paths (marks are drawn unclipped; the axes' limits
hold them), text kept as `<text>` in DejaVu Sans, and only ids that something
refers to (salted per chart, so several charts can share one page). Every chart is an
`<svg class="chart" id=...>` with a `<title>`; every plotted mark is a group
with a class (`point`, `box`, `bar`, `line`, `ci`, `pareto-front`,
`winner-ring`) and a `<title>` that shows its label and values on hover, so
tests can count what was drawn.

matplotlib is imported inside the drawing functions: only `bakeoff report`
needs it. `num`, `color` and the quality-grid helpers need nothing.
"""

from __future__ import annotations

import io
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

WIDTH = 720  # px on screen: the page is at most 1100 px wide
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
GRID = "#e6e6e6"

_SVG = "http://www.w3.org/2000/svg"
_XLINK = "http://www.w3.org/1999/xlink"
_PT = 72.0  # matplotlib's SVG user unit is the point; at 72 dpi one point is one px
# Upper and lower bounds of each quality metric (see judge/quality.py), and which way is better.
_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "cosine": (-1.0, 1.0),
    "agreement": (0.0, 1.0),
    "accuracy": (0.0, 1.0),
    "max_abs": (0.0, None),
}


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def num(x: float) -> str:
    """Three significant figures, no scientific notation for everyday sizes."""
    if x == 0 or not math.isfinite(x) or not (1e-4 <= abs(x) < 1e7):
        return f"{x:.3g}"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


# ---------------------------------------------------------------- quality scale


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


def _decimals(ticks: Sequence[float], step: float) -> int:
    """The fewest decimals that print every tick distinctly and near its value."""
    for d in range(0, 13):
        labels = [f"{t:.{d}f}" for t in ticks]
        if len(set(labels)) == len(labels) and all(
            abs(float(s) - t) < step * 1e-3 for s, t in zip(labels, ticks, strict=True)
        ):
            return d
    return 12


# ---------------------------------------------------------------- SVG plumbing


@dataclass
class _Marks:
    """Marks drawn with gid `{prefix}{n}`: each becomes `<g class=...><title>...`."""

    prefix: str
    items: list[tuple[str, str]]

    def add(self, cls: str, tip: str) -> str:
        self.items.append((cls, tip))
        return f"{self.prefix}{len(self.items) - 1}"


@contextmanager
def _figure(
    chart_id: str, height_px: float, width_px: float = WIDTH
) -> Iterator[tuple[Figure, Axes, _Marks]]:
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    settings: dict[RcKeyType, Any] = {
        "svg.fonttype": "none",  # text stays <text>, selectable and searchable
        "svg.hashsalt": chart_id,  # marker ids differ between charts on one page
        "font.family": "sans-serif",
        "font.sans-serif": ["DejaVu Sans"],
        "font.size": 11,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.axisbelow": True,
        "axes.edgecolor": "#333333",
        "axes.labelcolor": "#222222",
        "xtick.color": "#333333",
        "ytick.color": "#333333",
        "legend.frameon": False,
        "legend.fontsize": 10,
    }
    with matplotlib.rc_context(settings):
        layout = ConstrainedLayoutEngine(w_pad=4 / _PT, h_pad=4 / _PT)
        fig = Figure(figsize=(width_px / _PT, height_px / _PT), dpi=_PT, layout=layout)
        ax = fig.add_subplot()
        # Unclipped grid lines (the default clips them to the axes with a url(#...)).
        ax.grid(True, color=GRID, linewidth=0.8, clip_on=False)
        yield fig, ax, _Marks(f"{chart_id}-mark-", [])


def _plain_numbers(ax: Axes, axis: Literal["x", "y"], log: bool) -> None:
    """Tick labels as plain numbers: no offset ("1e-7+1"), no 10^k on log axes."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.xaxis if axis == "x" else ax.yaxis
    if log:
        target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}" if v >= 1 else f"{v:g}"))
        target.set_minor_formatter(NullFormatter())
    else:
        ax.ticklabel_format(axis=axis, style="plain", useOffset=False)


def _log_worth_it(values: Sequence[float]) -> bool:
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > 20


def _to_svg(fig: Figure, chart_id: str, title: str, marks: _Marks) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight", pad_inches=0.05)
    return tidy_svg(buf.getvalue(), chart_id, title, marks.prefix, marks.items)


def tidy_svg(
    raw: bytes, chart_id: str, title: str, prefix: str, marks: Sequence[tuple[str, str]]
) -> str:
    """matplotlib's SVG, made fit to inline in the report (see the module's doc)."""
    # The XML declaration and DOCTYPE go with the parse: the element is written alone.
    root = ET.fromstring(raw)
    # Inline in HTML an <svg> needs no namespace declarations (which would put the
    # namespaces' http:// names in a page that has no URL), and <use> takes plain
    # href: written without namespaces, the markup has neither xmlns nor ns0: prefixes.
    for el in root.iter():
        el.tag = el.tag.removeprefix(f"{{{_SVG}}}")
        if f"{{{_XLINK}}}href" in el.attrib:
            el.set("href", el.attrib.pop(f"{{{_XLINK}}}href"))
    parents = {child: parent for parent in root.iter() for child in parent}
    for el in list(root.iter()):
        if el.tag in ("metadata", "style"):
            parents[el].remove(el)
    for el in list(root.iter("defs")):
        if not len(el):
            parents[el].remove(el)
    # What the dropped page-wide `*{...}` style said, inherited from the root instead.
    root.set("stroke-linejoin", "round")
    root.set("stroke-linecap", "butt")

    # Each mark's parts (its gid'd groups) into one <g class=...> with a <title>.
    parts: dict[str, list[ET.Element]] = {}
    for el in root.iter():
        gid = el.get("id", "")
        if gid.startswith(prefix):
            parts.setdefault(gid, []).append(el)
    for n, (cls, tip) in enumerate(marks):
        found = parts.get(f"{prefix}{n}", [])
        if not found:
            continue
        holder = parents[found[0]]
        group = ET.Element("g", {"class": cls})
        ET.SubElement(group, "title").text = tip
        holder.insert(list(holder).index(found[0]), group)
        for el in found:
            parents[el].remove(el)
            del el.attrib["id"]
            group.append(el)
            parents[el] = group

    # Only ids something refers to stay (markers, salted per chart): matplotlib's
    # figure_1, axes_1, line2d_3 ... would repeat in every chart of the page.
    referenced: set[str] = set()
    for el in root.iter():
        for key, value in el.attrib.items():
            if key == "href" and value.startswith("#"):
                referenced.add(value[1:])
            referenced.update(re.findall(r"url\(#([^)]+)\)", value))
    for el in root.iter():
        if el is not root and "id" in el.attrib and el.attrib["id"] not in referenced:
            del el.attrib["id"]

    _, _, w, h = (float(v) for v in root.attrib["viewBox"].split())
    root.attrib.pop("version", None)
    root.set("class", "chart")
    root.set("id", chart_id)
    root.set("width", f"{w:.0f}")
    root.set("height", f"{h:.0f}")
    root.set("role", "img")
    root.set("aria-label", title)
    heading = ET.Element("title")
    heading.text = title
    root.insert(0, heading)
    return ET.tostring(root, encoding="unicode")


# ---------------------------------------------------------------- scatter


@dataclass(frozen=True)
class Point:
    label: str
    x: float
    y: float  # as drawn: on the quality grid (see snap)
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
) -> str:
    """Quality (y) against speed (x), the Pareto front as a dashed step line, the
    winner ringed and named. The quality axis spans at least `resolution`.

    Points are named in a legend below the plot (labels beside the points would
    overlap, since many variants share one quality); the winner is also named inline.
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

    legend_rows = (len(points) + 1) // 2
    with _figure(chart_id, 330 + 17 * legend_rows) as (fig, ax, marks):
        xs = [p.x for p in points] + [v for p in points if p.x_ci for v in p.x_ci]
        log_x = _log_worth_it(xs)
        if log_x:
            ax.set_xscale("log")
        _plain_numbers(ax, "x", log_x)

        lo, hi = quality_limits([p.y for p in points], resolution, metric)
        pad = (hi - lo) * 0.1
        ax.set_ylim(lo - pad, hi + pad)
        ticks = [
            t
            for t in MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
            if lo - (hi - lo) * 1e-6 <= t <= hi + (hi - lo) * 1e-6
        ]
        step = ticks[1] - ticks[0] if len(ticks) > 1 else hi - lo
        d = _decimals(ticks, step)
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.{d}f}"))
        # Hover values to the grid's step (they are snapped to it), at least.
        tip_d = max(d, math.ceil(-math.log10(resolution / 100) - 1e-9))

        front = sorted((p for p in points if p.on_front), key=lambda p: p.x)
        if len(front) > 1:
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
        handles: list[Any] = []
        labels: list[str] = []
        for i, p in enumerate(points):
            c = p.color or color(i)
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
            measured = ""
            if p.y_measured is not None and p.y_measured != p.y:
                measured = f" (measured {p.y_measured:.8g})"
            tip = f"{p.label}: {x_label} {num(p.x)}, {y_label} {p.y:.{tip_d}f}{measured}"
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
            mark = f" ({p.winner_word})" if p.winner else (" (Pareto front)" if p.on_front else "")
            handles.append(Line2D([], [], marker="o", linestyle="none", color=c, **style))
            labels.append(p.label + mark)
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
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        fig.legend(handles, labels, loc="outside lower center", ncols=2)
        winner = next((p for p in points if p.winner), None)
        if winner is not None:
            # Named on the side with room, so the label stays over the plot.
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
        return _to_svg(fig, chart_id, title, marks)


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

    with _figure(chart_id, 60 + 28 * len(rows)) as (fig, ax, marks):
        log_x = _log_worth_it([v for r in rows for v in (r.p1, r.p99)])
        if log_x:
            ax.set_xscale("log")
        _plain_numbers(ax, "x", log_x)
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
        return _to_svg(fig, chart_id, title, marks)


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
    with _figure(chart_id, 300 + 17 * ((len(series) + 1) // 2)) as (fig, ax, marks):
        ys = [y for s in series for y in s.ys] + [
            v for s in series for ci in s.cis if ci for v in ci
        ]
        log_y = _log_worth_it(ys)
        if log_y:
            ax.set_yscale("log")
        _plain_numbers(ax, "y", log_y)
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
        return _to_svg(fig, chart_id, title, marks)


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
    with _figure(chart_id, 60 + 22 * len(rows)) as (fig, ax, marks):
        _plain_numbers(ax, "x", False)
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
        return _to_svg(fig, chart_id, title, marks)


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
