"""`bakeoff report`: one self-contained HTML file for a stored run.

No scripts, no fonts, no images, no URLs: the charts are inline SVG (see
charts.py), the style is inline CSS, so the file opens the same offline, in a
mail attachment or a CI artifact. Every string that comes from the result
document is escaped.

This module lays the page out and writes its verdicts, tables and lists; the
chart sections are html_charts.py's, the environment section html_environment.py's.
"""

from __future__ import annotations

import datetime
from html import escape
from typing import Any

from bakeoff.efficiency import percent
from bakeoff.judge.verdict_words import pick_quality, statement
from bakeoff.report import html_charts
from bakeoff.report.charts import num
from bakeoff.report.data import StoredRun, flagged, leaders, status_label
from bakeoff.report.html_environment import environment
from bakeoff.report.page import page
from bakeoff.workload.generated import GENERATED_NOTE


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


# ---------------------------------------------------------------- sections


def _verdicts(run: StoredRun) -> str:
    if run.document is None:
        return (
            f'<div class="verdict none">Run {_e(run.run_id)} is {_e(run.record["status"])}: '
            "it has no verdict. Its candidates are shown below as far as they got; "
            f"<code>{_e(run.resume_command)}</code> finishes it.</div>"
        )
    out = []
    for v in run.verdicts:
        head, points, details = statement(v)
        quality = pick_quality(v, run.document["candidates"])
        points = [quality, *points] if quality else points
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
    if run.document["workload"].get("inputs") == "generated":
        out.append(f'<p class="note generated">{_e(GENERATED_NOTE)}.</p>')
    return "".join(out)


def _results_table(run: StoredRun) -> str:
    led = leaders(run.verdicts)
    marks = {True: " <strong>★ winner</strong>", False: " <strong>☆ leads</strong> (not separated)"}
    # A document from before issue 19 has no efficiency figures: its table stays as it was.
    with_peak = any("efficiency" in c for c in run.candidates)
    head = (
        "candidate",
        "status",
        "quality",
        "p50 ms [95% CI]",
        "p99 ms",
        "samples/s [95% CI]",
        *(("% of GEMM peak",) if with_peak else ()),
        "rounds × calls",
        "peak MiB",
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
            *((_of_peak(c.get("efficiency")),) if with_peak else ()),
            "–" if not lat else f"{lat['rounds']} × {lat['calls_per_round']}",
            _fmt(c.get("peak_rss_mb"), 0),
            _fmt(c.get("model_size_mb"), 1),
            _cold(c.get("cold_start_s") or {}, "load"),
            _cold(c.get("cold_start_s") or {}, "first_call"),
        ]
        tds = "".join(
            f"<td{' class=num' if i >= 2 else ''}>{cell}</td>" for i, cell in enumerate(cells)
        )
        rows.append(f'<tr data-candidate="{_e(c["id"])}">{tds}</tr>')
    ths = "".join(f"<th>{_e(h)}</th>" for h in head)
    return f'<table id="results"><tr>{ths}</tr>{"".join(rows)}</table>'


def _cold(cold: dict[str, Any], key: str) -> str:
    """A load or first-call figure; one that is no cold start measured alone says why
    on hover, with a †."""
    text = _fmt(cold.get(key))
    if cold.get("isolated") is not False:
        return text
    why = f"no cold start measured alone: {cold.get('not_isolated', '')}"
    return f'<span title="{_e(why)}">{text}†</span>'


def _of_peak(eff: dict[str, Any] | None) -> str:
    """The fraction of the GEMM peak, with the figures behind it on hover."""
    if not eff:
        return "–"
    behind = (
        f"{eff['flops_per_sample']:,} FLOPs per sample: {num(eff['achieved_gflops'])} GFLOP/s "
        f"of a {num(eff['peak_gflops'])} GFLOP/s peak"
    )
    return f'<span title="{_e(behind)}">{_e(percent(eff["fraction"]))}</span>'


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
    marks = {True: ("ok", "✓"), False: ("rejected", "✗")}
    body = "".join(
        "<tr><td>{}</td><td><span class='{}'>{}</span></td><td>{}</td></tr>".format(
            _e(a["text"]),
            *marks.get(a.get("confirmed"), ("unavailable", "-")),
            _e(a.get("why", "")),
        )
        for a in rows
    )
    settings = (run.document or {}).get("settings", {})
    source = settings.get("candidates_from", "-")
    return (
        f"<p class='note'>Target {_e(advice['target'])}; candidates from: {_e(source)} "
        "(<code>bakeoff advise</code> shows every rule and why).</p>"
        '<table id="advice"><tr><th>advice</th><th>held</th><th>what the run measured</th></tr>'
        f"{body}</table>"
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


def render(run: StoredRun) -> str:
    """The whole report as one HTML string."""
    doc = run.document or {}
    name = (doc.get("workload") or {}).get("name") or run.record.get("workload")
    when = datetime.datetime.fromtimestamp(run.record["created_at"]).strftime("%Y-%m-%d %H:%M")
    title = f"bakeoff report: {name} ({run.run_id})"
    sections = [
        ("verdict", "Verdict", _verdicts(run)),
        ("quality-speed", "Quality against speed", html_charts.quality_speed(run)),
        ("latency", "Latency distributions", html_charts.latency_distributions(run)),
        ("throughput", "Throughput against batch size", html_charts.throughput(run)),
        ("resources", "Peak memory and cold start", html_charts.resources(run)),
        ("size", "Model size", html_charts.sizes(run)),
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
    sections.append(("env", "Environment", environment(run)))
    intro = (
        f"<p class='note'>Run {_e(run.run_id)}, {_e(when)}, status {_e(run.record['status'])}.</p>"
    )
    return page(title, sections, intro)
