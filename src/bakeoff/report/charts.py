"""Small inline-SVG charts for the HTML report.

The report must open anywhere without a network and without scripts, so the
charts are plain SVG written here: a scatter with a Pareto front, box plots,
lines with CI bars and horizontal bars. Hovering a mark shows its `<title>`.
Every chart is an `<svg class="chart" id=...>`; every plotted mark carries a
class (`point`, `box`, `bar`, `line`) so tests can count what was drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 720
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


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def num(x: float) -> str:
    """Three significant figures, no scientific notation for everyday sizes."""
    if x == 0 or not math.isfinite(x) or not (1e-4 <= abs(x) < 1e7):
        return f"{x:.3g}"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


@dataclass
class Scale:
    """Maps data values to pixels; log10 when the data span more than 20x."""

    lo: float
    hi: float
    px_lo: float
    px_hi: float
    log: bool = False

    @classmethod
    def fit(
        cls, values: Sequence[float], px_lo: float, px_hi: float, allow_log: bool = True
    ) -> Scale:
        finite = [v for v in values if math.isfinite(v)]
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
        log = allow_log and lo > 0 and hi / lo > 20
        if log:
            lo, hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
        else:
            pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
            lo, hi = lo - pad, hi + pad
            if min(finite or [0.0]) >= 0 and lo < 0:
                lo = 0.0
        return cls(lo, hi, px_lo, px_hi, log)

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo)
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / ((self.hi - self.lo) or 1.0)
        return self.px_lo + t * (self.px_hi - self.px_lo)

    def ticks(self) -> list[float]:
        if self.log:
            a, b = round(math.log10(self.lo)), round(math.log10(self.hi))
            return [10.0**k for k in range(a, b + 1)]
        span = self.hi - self.lo or 1.0
        raw = span / 5
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
        first = math.ceil(self.lo / step) * step
        return [first + i * step for i in range(int((self.hi - first) / step + 1e-9) + 1)]


def _text(x: float, y: float, s: str, anchor: str = "middle", cls: str = "", size: int = 11) -> str:
    c = f' class="{cls}"' if cls else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}"{c}>'
        f"{escape(s)}</text>"
    )


def _frame(chart_id: str, height: int, title: str, body: list[str]) -> str:
    return (
        f'<svg class="chart" id="{escape(chart_id)}" '
        f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}" font-family="sans-serif">'
        f"<title>{escape(title)}</title>"
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#fff"/>'
        + "".join(body)
        + "</svg>"
    )


def _x_axis(sx: Scale, y: float, label: str, top: float) -> list[str]:
    out = [f'<line x1="{sx.px_lo}" y1="{y}" x2="{sx.px_hi}" y2="{y}" stroke="#333"/>']
    for t in sx.ticks():
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{y}" stroke="#eee"/>')
        out.append(_text(x, y + 14, f"{t:.6g}"))
    out.append(_text((sx.px_lo + sx.px_hi) / 2, y + 32, label, cls="axis-label"))
    return out


def _y_axis(sy: Scale, x: float, label: str, right: float) -> list[str]:
    out = [f'<line x1="{x}" y1="{sy.px_lo}" x2="{x}" y2="{sy.px_hi}" stroke="#333"/>']
    for t in sy.ticks():
        y = sy(t)
        out.append(f'<line x1="{x}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(_text(x - 6, y + 4, f"{t:.6g}", anchor="end"))
    mid = (sy.px_lo + sy.px_hi) / 2
    out.append(
        f'<text x="14" y="{mid:.1f}" text-anchor="middle" font-size="11" class="axis-label" '
        f'transform="rotate(-90 14 {mid:.1f})">{escape(label)}</text>'
    )
    return out


@dataclass(frozen=True)
class Point:
    label: str
    x: float
    y: float
    x_ci: tuple[float, float] | None = None
    winner: bool = False
    on_front: bool = False
    color: str = ""


def scatter(chart_id: str, title: str, points: list[Point], x_label: str, y_label: str) -> str:
    """Quality (y) against speed (x), the Pareto front joined, the winner ringed.

    Points are named in a legend below the plot (labels beside the points would
    overlap, since many variants share one quality); the winner is also named inline.
    """
    bottom, left, right, top = 330, 70, WIDTH - 20, 20
    height = bottom + 50 + 16 * ((len(points) + 1) // 2)
    xs = [p.x for p in points] + [v for p in points if p.x_ci for v in p.x_ci]
    sx = Scale.fit(xs, left, right)
    sy = Scale.fit([p.y for p in points], bottom, top, allow_log=False)
    body = _x_axis(sx, bottom, x_label, top) + _y_axis(sy, left, y_label, right)
    front = sorted((p for p in points if p.on_front), key=lambda p: p.x)
    if len(front) > 1:
        path = " ".join(f"{sx(p.x):.1f},{sy(p.y):.1f}" for p in front)
        body.append(
            f'<polyline class="pareto-front" points="{path}" fill="none" stroke="#2ca02c" '
            f'stroke-width="1.5" stroke-dasharray="5,3"/>'
        )
    for i, p in enumerate(points):
        x, y, c = sx(p.x), sy(p.y), p.color or color(i)
        if p.x_ci:
            body.append(
                f'<line class="ci" x1="{sx(p.x_ci[0]):.1f}" y1="{y:.1f}" '
                f'x2="{sx(p.x_ci[1]):.1f}" y2="{y:.1f}" stroke="{c}"/>'
            )
        cls = "point" + (" winner" if p.winner else "") + (" front" if p.on_front else "")
        tip = f"{p.label}: {x_label} {num(p.x)}, {y_label} {p.y:.4f}"
        body.append(
            f'<circle class="{cls}" cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{c}">'
            f"<title>{escape(tip)}</title></circle>"
        )
        if p.winner:
            body.append(
                f'<circle class="winner-ring" cx="{x:.1f}" cy="{y:.1f}" r="10" fill="none" '
                f'stroke="{WINNER}" stroke-width="2"/>'
            )
            # Named on the side with room, so the label never runs off the chart.
            side = (x + 12, "start") if x < (left + right) / 2 else (x - 12, "end")
            body.append(_text(side[0], y - 10, f"winner: {p.label}", side[1], size=12))
        lx = left + (i % 2) * (right - left) / 2
        ly = bottom + 50 + 16 * (i // 2)
        mark = " (winner)" if p.winner else (" (Pareto front)" if p.on_front else "")
        body.append(f'<circle cx="{lx + 5}" cy="{ly - 4}" r="5" fill="{c}"/>')
        body.append(_text(lx + 16, ly, p.label + mark, "start"))
    return _frame(chart_id, height, title, body)


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
    left, right, top, row_h = 230, WIDTH - 20, 16, 28
    bottom = top + row_h * len(rows) + 6
    height = bottom + 46
    sx = Scale.fit([v for r in rows for v in (r.p1, r.p99)], left, right)
    body = _x_axis(sx, bottom, x_label, top)
    for i, r in enumerate(rows):
        cy = top + row_h * i + row_h / 2
        c = r.color or color(i)
        tip = (
            f"{r.label}: p1 {num(r.p1)}, p25 {num(r.p25)}, p50 {num(r.p50)}, "
            f"p75 {num(r.p75)}, p99 {num(r.p99)} ({r.n} samples)"
        )
        body.append(_text(left - 8, cy + 4, r.label, "end"))
        body.append(
            f'<g class="box"><title>{escape(tip)}</title>'
            f'<line x1="{sx(r.p1):.1f}" y1="{cy}" x2="{sx(r.p99):.1f}" y2="{cy}" stroke="{c}"/>'
            f'<rect x="{sx(r.p25):.1f}" y="{cy - 8}" '
            f'width="{max(1.0, sx(r.p75) - sx(r.p25)):.1f}" height="16" fill="{c}" '
            f'fill-opacity="0.35" stroke="{c}"/>'
            f'<line x1="{sx(r.p50):.1f}" y1="{cy - 9}" x2="{sx(r.p50):.1f}" y2="{cy + 9}" '
            f'stroke="#000" stroke-width="2"/></g>'
        )
    return _frame(chart_id, height, title, body)


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
    legend_h = 16 * len(series)
    height, left, right, top = 300 + legend_h, 80, WIDTH - 20, 20
    bottom = 300 - 50
    ys = [y for s in series for y in s.ys] + [v for s in series for ci in s.cis if ci for v in ci]
    sy = Scale.fit(ys, bottom, top)
    step = (right - left) / max(1, len(cats))
    pos = {c: left + step * (i + 0.5) for i, c in enumerate(cats)}
    body = [f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/>']
    body += [_text(pos[c], bottom + 14, f"{c:g}") for c in cats]
    body.append(_text((left + right) / 2, bottom + 32, x_label, cls="axis-label"))
    body += _y_axis(sy, left, y_label, right)
    for i, s in enumerate(series):
        c = s.color or color(i)
        pts = sorted(zip(s.xs, s.ys, s.cis, strict=True))
        if len(pts) > 1:
            path = " ".join(f"{pos[x]:.1f},{sy(y):.1f}" for x, y, _ in pts)
            body.append(
                f'<polyline class="line" points="{path}" fill="none" stroke="{c}" '
                f'stroke-width="2"/>'
            )
        for x, y, ci in pts:
            if ci:
                body.append(
                    f'<line class="ci" x1="{pos[x]:.1f}" y1="{sy(ci[0]):.1f}" '
                    f'x2="{pos[x]:.1f}" y2="{sy(ci[1]):.1f}" stroke="{c}"/>'
                )
            ci_text = f" [{num(ci[0])}-{num(ci[1])}]" if ci else ""
            body.append(
                f'<circle class="point" cx="{pos[x]:.1f}" cy="{sy(y):.1f}" r="4" fill="{c}">'
                f"<title>{escape(f'{s.label} at {x:g}: {num(y)}{ci_text}')}</title></circle>"
            )
        ly = 300 + 16 * i
        body.append(f'<rect x="{left}" y="{ly - 9}" width="10" height="10" fill="{c}"/>')
        body.append(_text(left + 16, ly, s.label, "start"))
    return _frame(chart_id, height, title, body)


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    ci: tuple[float, float] | None = None
    note: str = ""
    color: str = ""


def bars(chart_id: str, title: str, rows: list[Bar], x_label: str) -> str:
    """Horizontal bars from zero, with an optional CI whisker; value printed at the end."""
    left, right, top, row_h = 230, WIDTH - 70, 16, 22
    bottom = top + row_h * len(rows) + 6
    height = bottom + 46
    hi = max([r.value for r in rows] + [r.ci[1] for r in rows if r.ci] + [0.0])
    sx = Scale(0.0, hi * 1.05 or 1.0, left, right)
    body = _x_axis(sx, bottom, x_label, top)
    for i, r in enumerate(rows):
        cy = top + row_h * i + row_h / 2
        tip = f"{r.label}: {num(r.value)}" + (f" [{num(r.ci[0])}-{num(r.ci[1])}]" if r.ci else "")
        body.append(_text(left - 8, cy + 4, r.label, "end"))
        body.append(
            f'<rect class="bar" x="{left}" y="{cy - 7}" width="{max(1.0, sx(r.value) - left):.1f}" '
            f'height="14" fill="{r.color or color(i)}"><title>{escape(tip + r.note)}</title></rect>'
        )
        if r.ci:
            body.append(
                f'<line class="ci" x1="{sx(r.ci[0]):.1f}" y1="{cy}" x2="{sx(r.ci[1]):.1f}" '
                f'y2="{cy}" stroke="#000"/>'
            )
        end = max(sx(r.value), sx(r.ci[1]) if r.ci else 0.0)
        body.append(_text(end + 4, cy + 4, num(r.value) + r.note, "start", size=10))
    return _frame(chart_id, height, title, body)
