"""`bakeoff report` for a text-generation run: one self-contained HTML page (the
inference report's style and rules: inline SVG and CSS, nothing fetched, every
string from the document escaped), or a Markdown summary.

The page: the verdicts (time per output token at batch 1; tokens/s with several
requests at once, or the server scenario's highest rate within its target); TPOT
and tokens/s as bars with their CIs; every engine's figures in one table; tokens/s
and TTFT p99 by requests at once; in the server scenario, TTFT p99 against the
offered rate with the target drawn; why an engine did not run; and the workload
and machine.
"""

from __future__ import annotations

from html import escape
from typing import Any

from bakeoff.report import charts
from bakeoff.report.charts import Bar, num
from bakeoff.report.data import StoredRun
from bakeoff.report.page import cell, definitions, kind_page, not_ok_list


def _e(value: Any) -> str:
    return escape(str(value))


def percentile_text(figure: dict[str, Any] | None, key: str) -> str:
    """A percentile with its CI ("?" where too few samples support it)."""
    if not figure:
        return "-"
    lo, hi = figure["ci95"][key]
    mark = "?" if key in figure["unsupported"] else ""
    return f"{num(figure[key])}{mark} [{num(lo)}–{num(hi)}]"


def rate_text(rate: dict[str, Any] | None) -> str:
    if not rate:
        return "-"
    lo, hi = rate["ci95"]
    return f"{num(rate['value'])} [{num(lo)}–{num(hi)}]"


def quality_text(q: dict[str, Any] | None) -> str:
    if not q:
        return "-"
    return (
        f"{q['token_agreement']:.0%} of tokens agree; perplexity {num(q['perplexity'])} "
        f"({q['perplexity_rise']:+.1%})"
    )


def headlines(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Each verdict as (what it judges, its headline): the TPOT one, then tokens/s at
    each number of requests at once (or why there was no sweep)."""
    verdict = doc["verdict"]
    out = [("time per output token at batch 1", verdict["tpot_batch_1"]["headline"])]
    if "server_rate" in verdict:  # the server scenario, in place of the sweep
        out.append(("request rate within the target", verdict["server_rate"]["headline"]))
        return out
    conc = verdict["tokens_per_s_concurrency"]
    for level, lv in conc.get("per_concurrency", {}).items():
        out.append((f"tokens/s, {level} requests at once", lv["headline"]))
    if not conc.get("per_concurrency"):
        out.append(("tokens/s under concurrency", conc["reason"]))
    return out


def _verdicts(doc: dict[str, Any]) -> str:
    return "".join(
        f'<div class="verdict"><p><strong>{_e(what)}</strong>: {_e(words)}</p></div>'
        for what, words in headlines(doc)
    )


def _bars(doc: dict[str, Any], colors: dict[str, str]) -> str:
    ok = [c for c in doc["candidates"] if c["tpot_ms"]]
    if not ok:
        return "<p>No engine was measured.</p>"
    tpot = [
        Bar(c["id"], c["tpot_ms"]["p50"], tuple(c["tpot_ms"]["ci95"]["p50"]), color=colors[c["id"]])
        for c in ok
    ]
    rate = [
        charts.estimate_bar(c, "tokens_per_s", colors[c["id"]]) for c in ok if c["tokens_per_s"]
    ]
    parts = [
        charts.bars(
            "gen-tpot",
            "Time per output token at batch 1, p50 (95% CI)",
            tpot,
            "ms (lower is better)",
        )
    ]
    if rate:
        parts.append(
            charts.bars(
                "gen-tokens-per-s",
                "Tokens/s at batch 1, one request at a time (95% CI)",
                rate,
                "tokens/s (higher is better)",
            )
        )
    return "".join(parts)


# The table of every engine's figures, in the report and in the terminal.
COLUMNS = (
    "candidate",
    "status",
    "TPOT p50 ms [95% CI]",
    "TTFT p50 ms [95% CI]",
    "TTFT p99 ms",
    "tokens/s [95% CI]",
    "quality",
    "peak MiB",
    "size MiB",
    "build / load / first token s",
)


def row_cells(c: dict[str, Any]) -> list[str]:
    cold = c["cold_start_s"]
    # validity qualifies a measured candidate; one that never ran is just its status
    noisy = c["status"] == "ok" and c["validity"] not in ("", "valid")
    status = c["status"] + (f", {c['validity']}" if noisy else "")
    return [
        c["id"],
        status,
        percentile_text(c["tpot_ms"], "p50"),
        percentile_text(c["ttft_ms"], "p50"),
        percentile_text(c["ttft_ms"], "p99"),
        rate_text(c["tokens_per_s"]),
        quality_text(c["quality"]),
        "-" if c["peak_rss_mb"] is None else num(c["peak_rss_mb"]),
        "-" if c["model_size_mb"] is None else num(c["model_size_mb"]),
        "-"
        if cold["load"] is None
        else f"{num(cold['build'] or 0)} / {num(cold['load'])} / {num(cold['first_token'] or 0)}",
    ]


def _table(doc: dict[str, Any]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{_e(x)}</td>" for x in row_cells(c)) + "</tr>"
        for c in doc["candidates"]
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def concurrency_rows(doc: dict[str, Any]) -> tuple[list[int], list[tuple[str, list[str]]]]:
    """The requests-at-once levels, and per swept engine its `tokens/s / TTFT p99` at each."""
    swept = [c for c in doc["candidates"] if c.get("concurrency")]
    levels = sorted({int(k) for c in swept for k in c["concurrency"]})
    rows = []
    for c in swept:
        cells = []
        for level in levels:
            lv = c["concurrency"].get(str(level))
            cells.append(
                "-"
                if lv is None
                else f"{rate_text(lv['tokens_per_s'])} / {num(lv['ttft_ms']['p99'])} ms"
            )
        rows.append((c["id"], cells))
    return levels, rows


def _concurrency(doc: dict[str, Any]) -> str:
    levels, rows = concurrency_rows(doc)
    if not rows:
        return ""
    batching = {c["id"]: (c.get("settings") or {}).get("batching", "") for c in doc["candidates"]}
    head = "<th>engine</th>" + "".join(f"<th>{level} at once</th>" for level in levels)
    body = "".join(
        f"<tr><td>{_e(cid)}</td>"
        + "".join(f"<td>{_e(x)}</td>" for x in cells)
        + f"<td>{_e(batching[cid])}</td></tr>"
        for cid, cells in rows
    )
    head += "<th>batching</th>"
    return (
        "<p class='note'>Tokens/s [95% CI] / TTFT p99, with that many requests submitted "
        f"together.</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def _per_rate(c: dict[str, Any], key: str) -> tuple[list[float], list[float]]:
    """Each rate sent, once (the worst of its sends), ascending: (rates, values)."""
    worst: dict[float, float] = {}
    for step in c["server"].get("tested", []):
        value = step[key]["p99"] if key in ("ttft_ms", "tpot_ms") else step[key]
        worst[step["rate"]] = max(worst.get(step["rate"], value), value)
    rates = sorted(worst)
    return rates, [worst[r] for r in rates]


def _server(doc: dict[str, Any], colors: dict[str, str]) -> str:
    """TTFT p99 against the offered rate per engine, the target drawn; tokens/s per
    user against total tokens/s (the trade-off a rate buys); each engine's highest
    rate."""
    target = (doc["verdict"].get("server_rate") or {}).get("target")
    served = [c for c in doc["candidates"] if (c.get("server") or {}).get("tested")]
    if target is None or not served:
        return ""
    ttft = [charts.Curve(c["id"], *_per_rate(c, "ttft_ms"), color=colors[c["id"]]) for c in served]
    everywhere = sorted({r for curve in ttft for r in curve.xs})
    line = [everywhere[0], everywhere[-1]]
    ttft.append(charts.Curve("target", line, [target["ttft_p99_ms"]] * 2, "#000000", dashed=True))
    trade = []
    for c in served:
        steps = sorted(c["server"]["tested"], key=lambda s: s["output_tokens_per_s"])
        per_user = [1000.0 / max(s["tpot_ms"]["p50"], 1e-9) for s in steps]
        total = [s["output_tokens_per_s"] for s in steps]
        trade.append(charts.Curve(c["id"], total, per_user, color=colors[c["id"]]))
    rows = "".join(
        f"<tr><td>{_e(c['id'])}</td><td>{_e(_highest(c))}</td>"
        f"<td>{_e(c['server'].get('batching', ''))}</td></tr>"
        for c in served
    )
    how = target["how"]
    return (
        f"<p class='note'>Poisson arrivals; target p99 TTFT {num(target['ttft_p99_ms'])} ms "
        f"({_e(how['ttft_p99_ms'])}), p99 TPOT {num(target['tpot_p99_ms'])} ms "
        f"({_e(how['tpot_p99_ms'])}).</p>"
        + charts.curves(
            "gen-server-ttft",
            "TTFT p99 against the offered rate (the target dashed)",
            ttft,
            "offered requests/s",
            "TTFT p99 ms",
            log_y=True,
        )
        + charts.curves(
            "gen-server-tradeoff",
            "Tokens/s per user against total tokens/s, by offered rate",
            trade,
            "total output tokens/s",
            "tokens/s per user (1000 / TPOT p50 ms)",
        )
        + "<table><thead><tr><th>engine</th><th>highest rate within the target</th>"
        f"<th>batching</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _highest(c: dict[str, Any]) -> str:
    top = c["server"].get("highest_rate")
    if top is None:
        # the search keeps only a rate met in every send; one met now and then is not
        lowest = c["server"].get("lowest_missed")
        missed = f"; missed at {num(lowest)}/s" if lowest is not None else ""
        return f"met in every send at no rate tried{missed}"
    good = top["goodput"]
    return (
        f"{num(top['requests_per_s'])}/s (goodput {num(good['value'])} "
        f"[{num(good['ci95'][0])}–{num(good['ci95'][1])}]; missed at "
        f"{num(top['bracket'][1]) if top['bracket'][1] else '-'}/s)"
    )


def workload_words(doc: dict[str, Any]) -> str:
    wl = doc["workload"]
    lengths = wl["prompt_tokens"]
    return (
        f"{wl['prompts']} prompts of {lengths['min']:.0f}–{lengths['max']:.0f} tokens "
        f"(median {lengths['p50']:.0f}), {wl['max_new_tokens']} new tokens each, "
        f"{wl['decoding']} decoding; the reference {doc['reference']['id']} has perplexity "
        f"{num(doc['reference']['perplexity'])} on {wl['perplexity_tokens']} held-out tokens"
    )


def _workload(doc: dict[str, Any]) -> str:
    env = doc.get("environment") or {}
    cpu = env.get("cpu") or {}
    rows = {
        "workload": workload_words(doc),
        "model folder": doc["workload"]["folder"],
        "CPU": cpu.get("model"),
        "Python": env.get("python"),
        "bakeoff": env.get("bakeoff_version"),
    }
    return definitions(rows)


def render(run: StoredRun) -> str:
    return kind_page(
        run,
        f"bakeoff text-generation report: {run.record.get('workload')} ({run.run_id})",
        _sections,
    )


def _sections(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    colors = {c["id"]: charts.color(i) for i, c in enumerate(doc["candidates"])}
    return [
        ("verdict", "Verdict", _verdicts(doc)),
        ("speed", "Time per output token and tokens/s", _bars(doc, colors)),
        ("results", "All engines", _table(doc)),
        ("concurrency", "Under concurrency", _concurrency(doc)),
        ("server", "Server scenario: request rate within the target", _server(doc, colors)),
        ("not-ok", "Rejected, failed and unavailable", not_ok_list(doc["candidates"])),
        ("workload", "Workload and machine", _workload(doc)),
    ]


def markdown(run: StoredRun) -> str:
    doc = run.document
    lines = [f"## bakeoff text generation: {cell(run.record.get('workload'))} (run `{run.run_id}`)"]
    lines.append("")
    if doc is None:
        return "\n".join([*lines, f"Run status: **{run.record['status']}**; no result.", ""])
    lines += [f"- **{cell(what)}**: {cell(words)}" for what, words in headlines(doc)]
    lines += ["", cell(workload_words(doc)) + ".", ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(x) for x in row_cells(c)) + " |" for c in doc["candidates"]]
    return "\n".join([*lines, ""])
