"""The HTML report's chart sections: quality against speed (with the Pareto
front), latency distributions, throughput against batch size, peak memory and
cold start, and model size. Each takes a stored run and gives the section's
HTML: the charts (charts.py) and the notes that say how to read them. One
variant keeps one color in every chart.
"""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np

from bakeoff.report import charts, scales, scatter
from bakeoff.report.charts import num
from bakeoff.report.data import StoredRun, leaders

_SPEED_LABEL = {"latency": "p50 latency (ms, lower is better)", "throughput": "samples/s"}


def _e(value: Any) -> str:
    return escape(str(value))


def _variant(c: dict[str, Any]) -> str:
    """The candidate id without its batch size: one line across batch sizes."""
    return str(c["id"]).removesuffix(f"-b{c['batch_size']}")


def _colors(run: StoredRun) -> dict[str, str]:
    """One color per variant, the same in every chart."""
    out: dict[str, str] = {}
    for c in run.candidates:
        out.setdefault(_variant(c), charts.color(len(out)))
    return out


def _color(run: StoredRun, c: dict[str, Any]) -> str:
    return _colors(run)[_variant(c)]


def _batch_sizes(run: StoredRun) -> list[int]:
    return sorted({int(c["batch_size"]) for c in run.candidates})


def _quality_value(c: dict[str, Any]) -> float | None:
    q = c.get("quality")
    if not q or q.get("value") is None or not np.isfinite(q["value"]):
        return None
    return float(q["value"])


def _speed(c: dict[str, Any], objective: str) -> tuple[float, tuple[float, float]] | None:
    if objective == "latency":
        lat = c.get("latency_ms")
        if not lat:
            return None
        return float(lat["p50"]), (lat["ci95"]["p50"][0], lat["ci95"]["p50"][1])
    thr = c.get("throughput")
    if not thr:
        return None
    return float(thr["samples_per_s"]), (thr["ci95"][0], thr["ci95"][1])


def pareto(points: list[tuple[str, float, float]], lower_x: bool, lower_y: bool) -> set[str]:
    """Ids of the points no other point beats on both axes (ties on one axis allowed).

    Give it quality already on the chart's grid (scales.snap): a cosine of
    0.99999994 against 1.0 is float noise, and must not keep a slower FP32
    variant on the front."""
    sx, sy = (1 if lower_x else -1), (1 if lower_y else -1)
    front = set()
    for pid, x, y in points:
        dominated = any(
            sx * x2 <= sx * x and sy * y2 <= sy * y and (x2 != x or y2 != y) for _, x2, y2 in points
        )
        if not dominated:
            front.add(pid)
    return front


def quality_speed(run: StoredRun) -> str:
    led = leaders(run.verdicts)
    gate = (run.document or {}).get("workload") or {}
    return "".join(_quality_speed_at(run, bs, led, gate) for bs in _batch_sizes(run))


def _quality_speed_at(run: StoredRun, bs: int, led: dict[str, bool], gate: dict[str, Any]) -> str:
    """Batch size `bs`'s chart of quality against speed, and what it shows in words."""
    objective = run.objective(bs)
    rows = _with_quality_and_speed(run, bs, objective)
    if not rows:
        return f"<p class='note'>Batch {bs}: no candidate has both quality and speed.</p>"
    metric = rows[0][0]["quality"]["metric"]
    max_drop = rows[0][0]["quality"].get("max_drop", gate.get("max_drop"))
    resolution = scales.quality_resolution(metric, max_drop, [q for _, q, _ in rows])
    # Quality as drawn, and as the front is computed: on a grid the gate's own
    # resolution cannot tell apart, so float noise is not a difference.
    drawn = {c["id"]: scales.snap(q, resolution) for c, q, _ in rows}
    lower_x = objective == "latency"
    front = pareto(
        [(c["id"], sp[0], drawn[c["id"]]) for c, _, sp in rows],
        lower_x=lower_x,
        lower_y=scales.lower_is_better(metric),
    )
    points = [
        scatter.Point(
            c["id"],
            sp[0],
            drawn[c["id"]],
            sp[1],
            c["id"] in led,
            c["id"] in front,
            _color(run, c),
            y_measured=q,
            winner_word="winner" if led.get(c["id"]) else "leads, not separated",
        )
        for c, q, sp in rows
    ]
    better = "lower" if scales.lower_is_better(metric) else "higher"
    reference = rows[0][0]["quality"].get("reference")
    gate_line = None
    if reference is not None and max_drop is not None:
        lower = scales.lower_is_better(metric)
        gate_line = reference + max_drop if lower else reference - max_drop
    rejected = [
        (c["id"], q)
        for c in run.candidates
        if c["batch_size"] == bs and c["status"] == "rejected"
        if (q := _quality_value(c)) is not None
    ]
    chart = scatter.scatter(
        f"chart-quality-speed-b{bs}",
        f"Quality against {objective} at batch {bs}",
        points,
        _SPEED_LABEL[objective],
        f"{metric} ({better} is better)",
        resolution=resolution,
        lower_x=lower_x,
        metric=metric,
        gate=gate_line,
        rejected=rejected,
    )
    return (
        f"<h3>Batch {bs}</h3>{chart}"
        f"<p class='note'>{_e(_front_text(front, drawn, metric, lower_x))} Ringed: the leader "
        "(see the verdict for whether it is separated). Horizontal bars: 95% CIs. "
        f"{_e(_scale_text(resolution, max_drop))}</p>"
    )


def _with_quality_and_speed(
    run: StoredRun, bs: int, objective: str
) -> list[tuple[dict[str, Any], float, tuple[float, tuple[float, float]]]]:
    """The ok candidates at batch size `bs` with both a quality and a speed, each
    with them."""
    rows = []
    for c in run.candidates:
        if c["batch_size"] != bs or c["status"] != "ok":
            continue
        q, sp = _quality_value(c), _speed(c, objective)
        if q is not None and sp is not None:
            rows.append((c, q, sp))
    return rows


def _front_text(front: set[str], drawn: dict[str, float], metric: str, lower_x: bool) -> str:
    """What the chart's Pareto front is, or why it has no line."""
    faster = "faster" if lower_x else "higher in throughput"
    if len(front) > 1:
        return (
            f"Dashed step line: the Pareto front, joining the {len(front)} candidates "
            f"(outlined) for which no other candidate is both {faster} and at least as good."
        )
    if len(set(drawn.values())) == 1:
        return (
            f"Every candidate has the same {metric} here, so only the "
            f"{'fastest' if lower_x else 'highest-throughput'} one, {next(iter(front))}, "
            "is on the Pareto front (outlined): there is no front line to draw."
        )
    return (
        f"Only {next(iter(front))} is on the Pareto front (outlined): it is both the "
        f"{'fastest' if lower_x else 'highest-throughput'} candidate and the best on "
        f"{metric}, so there is no front line to draw."
    )


def _scale_text(resolution: float, max_drop: float | None) -> str:
    """How the quality axis is drawn: on what grid, and where that comes from."""
    source = (
        f"the gate's max drop, {resolution:g}"
        if resolution == max_drop
        else f"{resolution:g}, a thousandth of the metric's scale: the gate has no max drop"
    )
    return (
        f"Quality is drawn on a grid of {resolution / 100:g} (a hundredth of {source}) "
        f"and its axis spans at least {resolution:g}: values closer than the grid, such "
        "as float noise (0.99999994 against 1.0), are drawn as one."
    )


def latency_distributions(run: StoredRun) -> str:
    out = []
    for bs in _batch_sizes(run):
        rows = []
        for c in run.candidates:
            if c["batch_size"] != bs or c["status"] != "ok":
                continue
            ms = run.samples_ns(c["id"]).astype(np.float64) / 1e6
            if ms.size == 0:
                continue
            p = np.percentile(ms, [1, 25, 50, 75, 99])
            p1, p25, p50, p75, p99 = (float(v) for v in p)
            rows.append(charts.Box(c["id"], p1, p25, p50, p75, p99, int(ms.size), _color(run, c)))
        if not rows:
            continue
        rows.sort(key=lambda b: b.p50)
        out.append(f"<h3>Batch {bs}</h3>")
        out.append(
            charts.boxes(
                f"chart-latency-b{bs}",
                f"Latency per call at batch {bs}",
                rows,
                "latency per call (ms)",
            )
        )
    if not out:
        return "<p class='note'>No measured samples are stored for this run.</p>"
    out.append(
        "<p class='note'>Whiskers p1–p99, box p25–p75, black line p50, over every timed call "
        "of every round.</p>"
    )
    return "".join(out)


def throughput(run: StoredRun) -> str:
    series: dict[str, charts.Series] = {}
    for c in run.candidates:
        thr = c.get("throughput")
        if c["status"] != "ok" or not thr:
            continue
        s = series.setdefault(_variant(c), charts.Series(_variant(c), [], [], [], _color(run, c)))
        s.xs.append(float(c["batch_size"]))
        s.ys.append(float(thr["samples_per_s"]))
        s.cis.append((thr["ci95"][0], thr["ci95"][1]))
    if not series:
        return "<p class='note'>No throughput was measured.</p>"
    return charts.lines(
        "chart-throughput",
        "Throughput against batch size",
        list(series.values()),
        "batch size",
        "samples/s (95% CI)",
    )


def resources(run: StoredRun) -> str:
    ok = [c for c in run.candidates if c["status"] == "ok"]
    out = []
    mem = [
        charts.Bar(c["id"], c["peak_rss_mb"], color=_color(run, c))
        for c in ok
        if c.get("peak_rss_mb") is not None
    ]
    if mem:
        out.append("<h3>Peak memory (resident set of the worker process)</h3>")
        out.append(charts.bars("chart-memory", "Peak memory (RSS)", mem, "MiB"))
    load_rows: list[charts.Bar] = []
    first_rows: list[charts.Bar] = []
    for c in ok:
        cs = c.get("cold_start_s") or {}
        for key, rows in (("load", load_rows), ("first_call", first_rows)):
            if cs.get(key) is None:
                continue
            ci = cs.get(f"{key}_ci95")
            note = f" (mean of {cs['repeats']})" if cs.get("repeats") else ""
            if key == "load" and cs.get("import") is not None:
                note += f" (imports {num(cs['import'])} s)"
            rows.append(
                charts.Bar(c["id"], cs[key], tuple(ci) if ci else None, note, _color(run, c))
            )
    if load_rows:
        out.append(
            "<h3>Cold start: loading the model in a fresh process</h3><p class='note'>From "
            "process start to a loaded model; the import statements run meanwhile (the "
            "runtime's libraries, the model's code) are its share given as imports.</p>"
        )
        out.append(charts.bars("chart-cold-load", "Cold start: load", load_rows, "seconds"))
    if first_rows:
        out.append("<h3>Cold start: the first call after loading</h3>")
        out.append(
            charts.bars("chart-cold-first-call", "Cold start: first call", first_rows, "seconds")
        )
    return "".join(out) or "<p class='note'>No memory or cold-start figures were recorded.</p>"


def sizes(run: StoredRun) -> str:
    seen: dict[str, float] = {}
    for c in run.candidates:
        if c.get("model_size_mb") is not None:
            seen.setdefault(_variant(c), float(c["model_size_mb"]))
    if not seen:
        return "<p class='note'>No model sizes were recorded.</p>"
    colors = _colors(run)
    rows = [charts.Bar(k, v, color=colors[k]) for k, v in seen.items()]
    return charts.bars("chart-model-size", "Model size on disk", rows, "MiB")
