"""The HTML report's charts (matplotlib's SVG, tidied for inlining), on hand-made runs.

No real run here: each test builds a StoredRun from a small result document and
reads the SVG back with ElementTree.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from bakeoff.report import charts, html_charts, scales
from bakeoff.report.data import StoredRun


def _candidate(cid: str, p50: float, quality: float, max_drop: float = 0.01) -> dict[str, Any]:
    return {
        "id": cid,
        "batch_size": 1,
        "status": "ok",
        "quality": {"metric": "cosine", "value": quality, "max_drop": max_drop},
        "latency_ms": {"p50": p50, "ci95": {"p50": [p50 * 0.95, p50 * 1.05]}},
    }


def _run(candidates: list[dict[str, Any]], winner: str) -> StoredRun:
    verdict = {"batch_size": 1, "objective": "latency", "winner": winner}
    doc = {
        "workload": {"name": "w", "metric": "cosine", "max_drop": 0.01},
        "verdicts": [verdict],
        "candidates": candidates,
    }
    return StoredRun(
        {"run_id": "r", "status": "done", "document": doc, "environment": {}, "settings": {}}
    )


def _svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", page, re.S)]


def _marks(svg: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in svg.iter("g") if cls in (g.get("class") or "").split()]


def _y_tick_labels(svg: ET.Element) -> list[str]:
    """The quality axis's tick labels: the right-aligned numbers left of the plot."""
    out = []
    for t in svg.iter("text"):
        if "text-anchor: end" in (t.get("style") or "") and re.fullmatch(
            r"-?\d+\.?\d*", t.text or ""
        ):
            out.append(t.text or "")
    return out


def test_float_noise_is_drawn_as_one_quality() -> None:
    """Cosine 1.0 and 0.99999994 (max_drop 0.01): one height, ticks that differ, and
    only the fastest on the front, which the caption says instead of a line."""
    run = _run(
        [
            _candidate("fast-b1", 0.5, 0.99999994),
            _candidate("mid-b1", 1.0, 1.0),
            _candidate("slow-b1", 2.0, 0.9999999),
        ],
        winner="fast-b1",
    )
    page = html_charts.quality_speed(run)
    (svg,) = _svgs(page)
    assert svg.get("id") == "chart-quality-speed-b1" and svg.get("class") == "chart"
    points = _marks(svg, "point")
    assert len(points) == 3
    heights = {use.get("y") for p in points for use in p.iter("use")}
    assert len(heights) == 1, heights
    assert [p.get("class") for p in points] == ["point winner front", "point", "point"]
    assert len(_marks(svg, "winner-ring")) == 1
    assert _marks(svg, "pareto-front") == []
    ticks = _y_tick_labels(svg)
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
    values = [float(t) for t in ticks]
    assert max(values) <= 1.0  # a cosine never passes 1
    assert max(values) - min(values) >= 0.01 * 0.5  # the axis is not 1e-7 tall
    assert "only the fastest one, fast-b1, is on the Pareto front" in page
    assert "no front line to draw" in page and "Dashed" not in page
    assert "a grid of 0.0001 (a hundredth of the gate&#x27;s max drop, 0.01)" in page
    # Each mark says what it is on hover.
    (title,) = points[0].findall("title")
    assert (title.text or "").startswith("fast-b1: p50 latency") and "0.99999994" in (
        title.text or ""
    )


def test_a_real_trade_off_draws_the_front() -> None:
    run = _run(
        [
            _candidate("fast-b1", 0.5, 0.990),
            _candidate("exact-b1", 1.0, 1.0),
            _candidate("worse-b1", 2.0, 0.995),
        ],
        winner="fast-b1",
    )
    page = html_charts.quality_speed(run)
    (svg,) = _svgs(page)
    (front,) = _marks(svg, "pareto-front")
    assert (front.findtext("title") or "") == "Pareto front: fast-b1, exact-b1"
    assert [p.get("class") for p in _marks(svg, "point")] == [
        "point winner front",
        "point front",
        "point",
    ]
    heights = [use.get("y") for p in _marks(svg, "point") for use in p.iter("use")]
    assert len(set(heights)) == 3
    assert "Dashed step line: the Pareto front, joining the 2 candidates" in page
    assert "no front line" not in page


def test_pareto_on_the_grid_drops_a_slower_equal() -> None:
    grid = 0.01
    pts = [("a", 1.0, scales.snap(1.0, grid)), ("b", 2.0, scales.snap(0.99999994, grid))]
    assert html_charts.pareto(pts, lower_x=True, lower_y=False) == {"a"}
    pts = [("a", 1.0, scales.snap(0.99, grid)), ("b", 2.0, scales.snap(1.0, grid))]
    assert html_charts.pareto(pts, lower_x=True, lower_y=False) == {"a", "b"}
    # max_abs: lower is better
    lower = scales.lower_is_better("max_abs")
    assert html_charts.pareto([("a", 1.0, 0.1), ("b", 2.0, 0.0)], True, lower) == {"a", "b"}
    assert html_charts.pareto([("a", 1.0, 0.0), ("b", 2.0, 0.1)], True, True) == {"a"}


@pytest.mark.parametrize(
    ("values", "resolution", "metric"),
    [
        ([1.0, 0.99999994], 0.01, "cosine"),
        ([0.5], 0.001, "accuracy"),
        ([0.0, 1e-9], 0.05, "max_abs"),
        ([0.2, 0.9], 0.01, "agreement"),
        ([3.0, 3.0], 0.01, ""),
    ],
)
def test_the_quality_axis_spans_at_least_the_resolution(
    values: list[float], resolution: float, metric: str
) -> None:
    lo, hi = scales.quality_limits(values, resolution, metric)
    assert hi - lo >= resolution * (1 - 1e-12)
    assert lo <= min(values) and hi >= max(values)
    bounds = {"cosine": (-1, 1), "accuracy": (0, 1), "agreement": (0, 1), "max_abs": (0, None)}
    low, high = bounds.get(metric, (None, None))
    assert low is None or lo >= low
    assert high is None or hi <= high


def test_resolution_and_snap() -> None:
    assert scales.quality_resolution("cosine", 0.01, [1.0]) == 0.01
    assert scales.quality_resolution("cosine", 0.0, [1.0]) == pytest.approx(0.001)
    assert scales.quality_resolution("accuracy", None, [0.9]) == pytest.approx(0.001)
    assert scales.quality_resolution("max_abs", 0.0, [0.0, 0.2]) == pytest.approx(0.0002)
    assert scales.snap(0.99999994, 0.01) == scales.snap(1.0, 0.01)
    assert scales.snap(0.9999, 0.01) != scales.snap(1.0, 0.01)  # a real 1e-4 difference


def test_charts_inline_cleanly_side_by_side() -> None:
    """Several charts in one page: no XML prolog, no clip paths or other url()s, no
    ns0: prefixes, no id twice, every referenced id defined, sized in px."""
    bars = [
        charts.Bar("torch-compile-fp32-b1", 5.3, (5.1, 5.5), " (mean of 5) (imports 5.10 s)"),
        charts.Bar("onnxruntime-fp32-b1", 0.04, None, " (mean of 5) (imports 0.03 s)"),
    ]
    page = "".join(
        [
            charts.bars("chart-cold-load", "Cold start: load", bars, "seconds"),
            charts.bars("chart-memory", "Peak memory", bars, "MiB"),
            charts.boxes(
                "chart-latency-b1",
                "Latency",
                [charts.Box("a", 1, 2, 3, 4, 5, 100), charts.Box("b", 2, 3, 4, 5, 90, 100)],
                "ms",
            ),
            charts.lines(
                "chart-throughput",
                "Throughput",
                [charts.Series("a", [1, 8], [100, 700], [(90, 110), None])],
                "batch size",
                "samples/s",
            ),
        ]
    )
    assert "<?xml" not in page and "<!DOCTYPE" not in page and "<metadata" not in page
    assert "url(" not in page and "ns0:" not in page and "<style" not in page
    assert "xmlns" not in page and "http" not in page  # the page holds no URL at all
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    svgs = _svgs(page)
    assert [s.get("id") for s in svgs] == [
        "chart-cold-load",
        "chart-memory",
        "chart-latency-b1",
        "chart-throughput",
    ]
    defined = set(ids)
    for svg in svgs:
        assert svg.get("class") == "chart" and svg.findtext("title")
        _, _, w, h = (float(v) for v in (svg.get("viewBox") or "").split())
        assert abs(float(svg.get("width") or 0) - w) < 1 and 600 < w < 800
        assert abs(float(svg.get("height") or 0) - h) < 1
        for el in svg.iter():
            href = el.get("href")
            assert href is None or href[1:] in defined
    # Two bars and one CI per chart, titled with label and value.
    cold = svgs[0]
    tips = [g.findtext("title") for g in _marks(cold, "bar")]
    assert tips == [
        "torch-compile-fp32-b1: 5.30 [5.10–5.50] (mean of 5) (imports 5.10 s)",
        "onnxruntime-fp32-b1: 0.0400 (mean of 5) (imports 0.03 s)",
    ]
    assert len(_marks(cold, "ci")) == 1
    assert len(_marks(svgs[2], "box")) == 2
    assert len(_marks(svgs[3], "point")) == 2 and len(_marks(svgs[3], "line")) == 1
    texts = [t.text for t in cold.iter("text")]
    assert "5.30 (mean of 5) (imports 5.10 s)" in texts  # as <text>, not glyph paths


def test_the_gate_is_drawn_and_what_it_rejected_beyond_it() -> None:
    """A rejected candidate has a quality and no speed (the gate stopped it before it
    was timed): a cross at the plot's left edge, beyond the dotted gate line."""
    rejected = {
        "id": "int8-b1",
        "batch_size": 1,
        "status": "rejected",
        "quality": {"metric": "cosine", "value": 0.97, "reference": 1.0, "max_drop": 0.01},
    }
    ok = [_candidate("fp32-b1", 1.0, 1.0), _candidate("fast-b1", 0.5, 0.995)]
    for c in ok:
        c["quality"]["reference"] = 1.0
    page = html_charts.quality_speed(_run([*ok, rejected], winner="fast-b1"))
    (svg,) = _svgs(page)
    (gate,) = _marks(svg, "gate")
    assert (gate.findtext("title") or "") == "the quality gate: 0.990"
    (cross,) = _marks(svg, "rejected")
    assert (cross.findtext("title") or "").startswith("int8-b1: rejected by the quality gate")
    assert "int8-b1 (rejected by the gate, not timed)" in ET.tostring(svg, encoding="unicode")
    values = [float(t) for t in _y_tick_labels(svg)]
    assert min(values) <= 0.975  # the axis reaches down to the rejected one
