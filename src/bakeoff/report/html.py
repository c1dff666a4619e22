"""`bakeoff report`: one self-contained HTML file for a stored run.

No scripts, no fonts, no images, no URLs: the charts are inline SVG (see
charts.py), the style is inline CSS, so the file opens the same offline, in a
mail attachment or a CI artifact. Every string that comes from the result
document is escaped.
"""

from __future__ import annotations

import datetime
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.judge.verdict import statement
from bakeoff.paths import resume_command
from bakeoff.report import charts
from bakeoff.report.charts import num
from bakeoff.report.data import StoredRun, flagged, leaders, load, status_label

_CSS = """
body { font-family: sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ccc; }
h3 { font-size: 15px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #2a7d2a; } .rejected { color: #a66a00; } .failed { color: #c62828; }
.unavailable { color: #777; } .flagged { color: #a66a00; font-weight: bold; }
.verdict { background: #f4f8f4; border-left: 4px solid #2ca02c; padding: 8px 12px; margin: 8px 0; }
.verdict.none { background: #fbf1f1; border-left-color: #c62828; }
.verdict.open { background: #fdf8ec; border-left-color: #a66a00; }
.verdict p.headline { margin: 0 0 4px 0; } .verdict ul { margin: 4px 0; }
.verdict details { font-size: 13px; color: #555; }
.card { display: grid; grid-template-columns: repeat(2, 1fr); gap: 12px; }
.card section { border: 1px solid #ddd; padding: 8px 12px; }
.card h3 { margin-top: 0; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0;
     font-size: 13px; }
dt { color: #555; } dd { margin: 0; }
.note { color: #555; font-size: 13px; }
svg.chart { display: block; margin: 8px 0; border: 1px solid #eee; max-width: 100%;
            height: auto; }
"""

_SPEED_LABEL = {"latency": "p50 latency (ms, lower is better)", "throughput": "samples/s"}


def _e(value: Any) -> str:
    return escape(str(value))


def _status(c: dict[str, Any]) -> str:
    label = status_label(c)
    css = "flagged" if label != c["status"] else c["status"]
    return f'<span class="{_e(css)}">{_e(label)}</span>'


def _ci(ci: list[float] | None) -> str:
    return "" if not ci else f" [{num(ci[0])}–{num(ci[1])}]"


def _fmt(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _variant(c: dict[str, Any]) -> str:
    """The candidate id without its batch size: one line across batch sizes."""
    return str(c["id"]).removesuffix(f"-b{c['batch_size']}")


def _dl(rows: list[tuple[str, Any]]) -> str:
    return (
        "<dl>"
        + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows if v not in (None, ""))
        + "</dl>"
    )


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


# ---------------------------------------------------------------- sections


def _verdicts(run: StoredRun) -> str:
    if run.document is None:
        return (
            f'<div class="verdict none">Run {_e(run.run_id)} is {_e(run.record["status"])}: '
            "it has no verdict. Its candidates are shown below as far as they got; "
            f"<code>{_e(resume_command(run.run_id, run.store))}</code> finishes it.</div>"
        )
    out = []
    for v in run.verdicts:
        head, points, details = statement(v)
        standing = v.get("standing") or ("clear" if v["winner"] else "none")
        cls = "verdict" + {"none": " none", "baseline-tied": " open", "no-baseline": " open"}.get(
            standing, ""
        )
        items = "".join(f"<li>{_e(p)}</li>" for p in points)
        stats = "".join(f"<li>{_e(d)}</li>" for d in details)
        out.append(
            f'<div class="{cls}" data-batch="{v["batch_size"]}" data-standing="{_e(standing)}">'
            f'<p class="headline"><strong>Batch {v["batch_size"]} ({_e(v["objective"])}):</strong> '
            f"{_e(head)}</p>"
            + (f'<ul class="points">{items}</ul>' if items else "")
            + (
                "<details><summary>Statistics behind this verdict</summary>"
                f"<ul>{stats}</ul></details>"
                if stats
                else ""
            )
            + "</div>"
        )
    return "".join(out)


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

    Give it quality already on the chart's grid (charts.snap): a cosine of
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


def _quality_speed(run: StoredRun) -> str:
    led = leaders(run.verdicts)
    gate = (run.document or {}).get("workload") or {}
    out = []
    for bs in _batch_sizes(run):
        objective = run.objective(bs)
        rows = []
        for c in run.candidates:
            if c["batch_size"] != bs or c["status"] != "ok":
                continue
            q, sp = _quality_value(c), _speed(c, objective)
            if q is not None and sp is not None:
                rows.append((c, q, sp))
        if not rows:
            out.append(f"<p class='note'>Batch {bs}: no candidate has both quality and speed.</p>")
            continue
        metric = rows[0][0]["quality"]["metric"]
        max_drop = rows[0][0]["quality"].get("max_drop", gate.get("max_drop"))
        resolution = charts.quality_resolution(metric, max_drop, [q for _, q, _ in rows])
        # Quality as drawn, and as the front is computed: on a grid the gate's own
        # resolution cannot tell apart, so float noise is not a difference.
        drawn = {c["id"]: charts.snap(q, resolution) for c, q, _ in rows}
        lower_x = objective == "latency"
        front = pareto(
            [(c["id"], sp[0], drawn[c["id"]]) for c, _, sp in rows],
            lower_x=lower_x,
            lower_y=charts.lower_is_better(metric),
        )
        points = [
            charts.Point(
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
        better = "lower" if charts.lower_is_better(metric) else "higher"
        out.append(f"<h3>Batch {bs}</h3>")
        out.append(
            charts.scatter(
                f"chart-quality-speed-b{bs}",
                f"Quality against {objective} at batch {bs}",
                points,
                _SPEED_LABEL[objective],
                f"{metric} ({better} is better)",
                resolution=resolution,
                lower_x=lower_x,
                metric=metric,
            )
        )
        faster = "faster" if lower_x else "higher in throughput"
        if len(front) > 1:
            front_text = (
                f"Dashed step line: the Pareto front, joining the {len(front)} candidates "
                f"(outlined) for which no other candidate is both {faster} and at least as good."
            )
        elif len(set(drawn.values())) == 1:
            front_text = (
                f"Every candidate has the same {metric} here, so only the "
                f"{'fastest' if lower_x else 'highest-throughput'} one, {next(iter(front))}, "
                "is on the Pareto front (outlined): there is no front line to draw."
            )
        else:
            front_text = (
                f"Only {next(iter(front))} is on the Pareto front (outlined): it is both the "
                f"{'fastest' if lower_x else 'highest-throughput'} candidate and the best on "
                f"{metric}, so there is no front line to draw."
            )
        source = (
            f"the gate's max drop, {resolution:g}"
            if resolution == max_drop
            else f"{resolution:g}, a thousandth of the metric's scale: the gate has no max drop"
        )
        scale = (
            f"Quality is drawn on a grid of {resolution / 100:g} (a hundredth of {source}) "
            f"and its axis spans at least {resolution:g}: values closer than the grid, such "
            "as float noise (0.99999994 against 1.0), are drawn as one."
        )
        out.append(
            f"<p class='note'>{_e(front_text)} Ringed: the leader (see the verdict for whether "
            f"it is separated). Horizontal bars: 95% CIs. "
            f"{_e(scale)}</p>"
        )
    return "".join(out)


def _latency_distributions(run: StoredRun) -> str:
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


def _throughput(run: StoredRun) -> str:
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


def _resources(run: StoredRun) -> str:
    ok = [c for c in run.candidates if c["status"] == "ok"]
    out = []
    mem = [
        charts.Bar(c["id"], c["peak_rss_mb"], color=_color(run, c))
        for c in ok
        if c.get("peak_rss_mb") is not None
    ]
    if mem:
        out.append("<h3>Peak memory (resident set of the worker process)</h3>")
        out.append(charts.bars("chart-memory", "Peak memory (RSS)", mem, "MB"))
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


def _sizes(run: StoredRun) -> str:
    seen: dict[str, float] = {}
    for c in run.candidates:
        if c.get("model_size_mb") is not None:
            seen.setdefault(_variant(c), float(c["model_size_mb"]))
    if not seen:
        return "<p class='note'>No model sizes were recorded.</p>"
    colors = _colors(run)
    rows = [charts.Bar(k, v, color=colors[k]) for k, v in seen.items()]
    return charts.bars("chart-model-size", "Model size on disk", rows, "MiB")


def _results_table(run: StoredRun) -> str:
    led = leaders(run.verdicts)
    marks = {True: " <strong>★ winner</strong>", False: " <strong>☆ leads</strong> (not separated)"}
    head = (
        "candidate",
        "status",
        "quality",
        "p50 ms [95% CI]",
        "p99 ms",
        "samples/s [95% CI]",
        "rounds × calls",
        "peak MB",
        "size MiB",
        "load s",
        "1st call s",
    )
    rows = []
    for c in run.candidates:
        lat, thr, q = c.get("latency_ms"), c.get("throughput"), c.get("quality")
        cells = [
            _e(c["id"]) + (marks[led[c["id"]]] if c["id"] in led else ""),
            _status(c),
            "–" if not q or q.get("value") is None else f"{q['value']:.4f}",
            "–" if not lat else _e(num(lat["p50"]) + _ci(lat["ci95"]["p50"])),
            "–"
            if not lat
            else _e(
                num(lat["p99"]) + (" (too few samples)" if "p99" in lat["unsupported"] else "")
            ),
            "–" if not thr else _e(num(thr["samples_per_s"]) + _ci(thr["ci95"])),
            "–" if not lat else f"{lat['rounds']} × {lat['calls_per_round']}",
            _fmt(c.get("peak_rss_mb"), 0),
            _fmt(c.get("model_size_mb"), 3),
            _fmt((c.get("cold_start_s") or {}).get("load")),
            _fmt((c.get("cold_start_s") or {}).get("first_call")),
        ]
        tds = "".join(
            f"<td{' class=num' if i >= 2 else ''}>{cell}</td>" for i, cell in enumerate(cells)
        )
        rows.append(f'<tr data-candidate="{_e(c["id"])}">{tds}</tr>')
    ths = "".join(f"<th>{_e(h)}</th>" for h in head)
    return f'<table id="results"><tr>{ths}</tr>{"".join(rows)}</table>'


def _not_ok(run: StoredRun) -> str:
    rows = [c for c in run.candidates if c["status"] not in ("ok", "pending")]
    rows += flagged(run.candidates)
    pending = sum(c["status"] == "pending" for c in run.candidates)
    if not rows and pending:
        return (
            f"<p>{pending} candidate{'s' if pending > 1 else ''} had not finished when the "
            "run stopped; no other failed or was flagged.</p>"
        )
    if not rows:
        return "<p>Every candidate was measured, and every result passed its gates.</p>"
    body = "".join(
        f'<tr data-candidate="{_e(c["id"])}"><td>{_e(c["id"])}</td><td>{_status(c)}</td>'
        f"<td>{_e(c['reason'] or c['validity_reason'])}</td></tr>"
        for c in sorted(rows, key=lambda c: (status_label(c), c["id"]))
    )
    return (
        f'<table id="not-ok"><tr><th>candidate</th><th>status</th><th>why</th></tr>{body}</table>'
    )


def _advice(run: StoredRun) -> str:
    """Per piece of advice that a run can check: did the measurement confirm it?"""
    advice = (run.document or {}).get("advice") or {}
    rows = [a for a in advice.get("advice", []) if a.get("confirm")]
    if not rows:
        return ""
    marks = {True: ("ok", "confirmed"), False: ("rejected", "not confirmed")}
    body = "".join(
        "<tr><td>{}</td><td><span class='{}'>{}</span></td><td>{}</td></tr>".format(
            _e(a["text"]),
            *marks.get(a.get("confirmed"), ("unavailable", "not measured")),
            _e(a.get("why", "")),
        )
        for a in rows
    )
    settings = (run.document or {}).get("settings", {})
    source = settings.get("candidates_from", "-")
    return (
        f"<p class='note'>Target {_e(advice['target'])}; candidates from: {_e(source)} "
        "(<code>bakeoff advise</code> shows every rule and why).</p>"
        f'<table id="advice"><tr><th>advice</th><th>measured</th><th>why</th></tr>{body}</table>'
    )


def _left_out_and_notes(run: StoredRun) -> str:
    """What was not built and why (the advice, or a variant another one made
    unnecessary), and what to bear in mind about figures that were measured."""
    settings = (run.document or {}).get("settings") or run.settings
    left_out = "".join(
        f"<p class='note'>Left out: <code>{_e(vid)}</code>, {_e(why)}.</p>"
        for vid, why in (settings.get("left_out") or {}).items()
    )
    notes = "".join(
        f"<p class='note'>Note on <code>{_e(c['id'])}</code>: {_e('; '.join(c['notes']))}.</p>"
        for c in run.candidates
        if c.get("notes") and c["status"] in ("ok", "rejected")
    )
    return left_out + notes


def _scenarios(run: StoredRun) -> str:
    out = []
    for c in run.candidates:
        srv = c.get("server")
        if srv:
            if srv.get("error"):
                text = f"failed: {srv['error']}"
            elif srv.get("max_qps") is None:
                text = f"no tried rate kept p99 within {srv['bound_ms']} ms"
            else:
                text = (
                    f"highest passing rate {srv['max_qps']:.1f} queries/s, p99 "
                    f"{srv['p99_ms_at_max']:.1f} ms (bound {srv['bound_ms']:g} ms)"
                )
            out.append(f"<li>{_e(c['id'])} (server): {_e(text)}</li>")
        off = c.get("offline")
        if off and off.get("best"):
            b = off["best"]
            out.append(
                f"<li>{_e(c['id'])} (offline): {_e(num(b['samples_per_s']))} samples/s with "
                f"{_e(b['concurrency'])} stream(s) × {_e(b['threads_per_stream'])} thread(s)</li>"
            )
    return f"<ul>{''.join(out)}</ul>" if out else ""


def _environment(run: StoredRun) -> str:
    env, st = run.environment, run.settings
    cpu = env.get("cpu") or {}
    doc = run.document or {}
    wl = doc.get("workload") or {}
    gpu = env.get("gpu")
    gpu_text = "none (no CUDA device)"
    if isinstance(gpu, dict):
        gpu_text = ", ".join(f"{k} {v}" for k, v in gpu.items())
    elif isinstance(gpu, list) and gpu:
        gpu_text = "; ".join(
            f"{g.get('name')} (driver {g.get('driver')}, {g.get('memory_mb', '?')} MiB)"
            if isinstance(g, dict)
            else str(g)
            for g in gpu
        )
    elif gpu:
        gpu_text = str(gpu)
    hardware = _dl(
        [
            ("CPU", cpu.get("model")),
            (
                "cores",
                f"{cpu.get('physical_cores')} physical / {cpu.get('logical_cores')} logical"
                + (f", affinity {cpu['affinity']}" if cpu.get("affinity") else ""),
            ),
            ("CPU flags", ", ".join(cpu.get("flags") or []) or "none notable"),
            (
                "CPU flags simulated",
                None
                if "flags_simulated" not in cpu
                else f"BAKEOFF_CPU_FLAGS={cpu['flags_simulated']!r} for the advice; the "
                f"runtimes ran on: {', '.join(cpu.get('detected_flags') or []) or 'none notable'}",
            ),
            ("frequency", f"{cpu['frequency_mhz']} MHz" if cpu.get("frequency_mhz") else None),
            ("memory", f"{env.get('memory_gb')} GiB"),
            ("GPU / driver", gpu_text),
            ("machine", env.get("machine")),
        ]
    )
    pkgs = ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items() if v)
    software = _dl(
        [
            ("bakeoff", env.get("bakeoff_version")),
            ("Python", env.get("python")),
            ("platform", env.get("platform")),
            ("packages", pkgs),
        ]
    )
    shapes = "; ".join(f"{k}: {v}" for k, v in run.input_shapes.items())
    workload = _dl(
        [
            ("name", wl.get("name") or run.record.get("workload")),
            ("origin", wl.get("origin") or st.get("workload_ref")),
            ("model kind", wl.get("model_kind")),
            ("reference", wl.get("reference")),
            ("input shapes (per sample)", shapes or "not recorded (run folder gone)"),
            ("variable axes", wl.get("variable_axes") or None),
            ("batch axes (not 0)", wl.get("batch_axes") or None),
            ("constant inputs", ", ".join(wl.get("constants") or []) or None),
            ("batch sizes", ", ".join(map(str, st.get("batch_sizes") or []))),
            ("runtimes", ", ".join(st.get("runtimes") or [])),
            ("precisions", ", ".join(st.get("precisions") or [])),
            (
                "data",
                f"{wl['samples']} samples, {wl['quality_samples']} held out for quality"
                if "samples" in wl
                else None,
            ),
            (
                "quality gate",
                f"{wl['metric']}, max drop {wl['max_drop']:g}" if "metric" in wl else None,
            ),
            ("notes", "; ".join(wl.get("notes") or []) or None),
        ]
    )
    warm = sorted(set(run.warmup_calls.values()))
    warm_text = (
        f"{warm[0]}–{warm[-1]} warm-up calls per candidate" if warm else "not recorded"
    ) + " (plus a settle slice before timing)"
    noise = doc.get("noise") or {}
    noise_text = None
    if noise:
        b, a = noise.get("before") or {}, noise.get("after") or {}
        noise_text = (
            f"load average {b.get('load_average')} before, {a.get('load_average')} after; "
            f"busy processes: {len(b.get('busy_processes') or [])} before, "
            f"{len(a.get('busy_processes') or [])} after"
        )
        for g in noise.get("during") or []:
            over = ", over it: results marked noisy" if g["busy"] else ""
            noise_text += (
                f"; batch {g['batch_size']}: other processes used "
                f"{g['other_cores_mean']:.2f} cores on average during the rounds "
                f"(gate {g['gate_cores']:.2f}{over})"
            )
    timing = doc.get("timing_s") or {}
    method = _dl(
        [
            ("scenario", st.get("scenario")),
            ("mode", "--quick" if st.get("quick") else "full"),
            ("threads per runtime", st.get("threads")),
            ("warm-up", warm_text),
            (
                "samples",
                "interleaved rounds of timed calls; "
                + ", ".join(
                    f"{c['id']}: {c['latency_ms']['rounds']}×{c['latency_ms']['calls_per_round']}"
                    for c in run.candidates
                    if c.get("latency_ms")
                ),
            ),
            ("budget", f"{st['budget_s']} s" if st.get("budget_s") else "default"),
            ("equivalence margin", f"{st.get('margin', 0.02):.0%}"),
            ("cold starts", st.get("cold_starts")),
            ("seed", st.get("seed")),
            ("machine noise", noise_text),
            (
                "time taken",
                f"{timing['total']:.0f} s (build {timing['build']:.0f} s, measure "
                f"{timing['measure']:.0f} s)"
                if "total" in timing
                else None,
            ),
        ]
    )
    settings_rows = "".join(
        f"<tr><td>{_e(c['id'])}</td><td>{_e(_settings_text(c.get('settings') or {}))}</td></tr>"
        for c in run.candidates
        if c.get("settings")
    )
    settings = (
        '<table id="runtime-settings"><tr><th>candidate</th><th>settings the runtime applied'
        f"</th></tr>{settings_rows}</table>"
        if settings_rows
        else "<p class='note'>No runtime settings were recorded.</p>"
    )
    return (
        '<div class="card" id="environment">'
        f"<section><h3>Hardware</h3>{hardware}</section>"
        f"<section><h3>Software</h3>{software}</section>"
        f"<section><h3>Workload</h3>{workload}</section>"
        f"<section><h3>Method</h3>{method}</section></div>"
        f"<h3>Settings each runtime applied</h3>{settings}"
    )


def _settings_text(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))


def render(run: StoredRun) -> str:
    """The whole report as one HTML string."""
    doc = run.document or {}
    name = (doc.get("workload") or {}).get("name") or run.record.get("workload")
    when = datetime.datetime.fromtimestamp(run.record["created_at"]).strftime("%Y-%m-%d %H:%M")
    title = f"bakeoff report: {name} ({run.run_id})"
    sections = [
        ("verdict", "Verdict", _verdicts(run)),
        ("quality-speed", "Quality against speed", _quality_speed(run)),
        ("latency", "Latency distributions", _latency_distributions(run)),
        ("throughput", "Throughput against batch size", _throughput(run)),
        ("resources", "Peak memory and cold start", _resources(run)),
        ("size", "Model size", _sizes(run)),
        ("results", "All candidates", _results_table(run)),
        ("not-measured", "Failed, rejected, unavailable and flagged", _not_ok(run)),
    ]
    if left_out := _left_out_and_notes(run):
        sections.append(("left-out", "Left out, and notes", left_out))
    advice = _advice(run)
    if advice:
        sections.append(("advice", "Advice, tested", advice))
    scenarios = _scenarios(run)
    if scenarios:
        sections.append(("scenarios", "Server and offline scenarios", scenarios))
    sections.append(("env", "Environment", _environment(run)))
    body = "".join(
        f'<section id="section-{sid}"><h2>{_e(head)}</h2>{html}</section>'
        for sid, head, html in sections
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        # No network at all, even if a string slipped through: scripts, fonts,
        # images and connections are refused by the page's own policy.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f"<p class='note'>Run {_e(run.run_id)}, {_e(when)}, status "
        f"{_e(run.record['status'])}.</p>" + body + "</body></html>\n"
    )


def write(run_id: str, store: str | Path, out: Path) -> Path:
    """Render a stored run to `out`; returns the path written."""
    html = render(load(run_id, store))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out
