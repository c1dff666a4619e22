"""`bakeoff report` for a training run: one self-contained HTML page (the inference
report's style and rules: inline SVG and CSS, nothing fetched, every string from
the document escaped), or a Markdown summary.

The page: the verdicts; samples/s with their CIs, peak memory and time to the
target as bars; the loss and the validation metric of every stack's seed 0 over
its steps; every stack's figures in one table; scaling for the multi-process
stacks; why a stack did not run; and the recipe and machine.
"""

from __future__ import annotations

from html import escape
from typing import Any

from bakeoff.report import charts
from bakeoff.report.charts import Bar, Curve, num
from bakeoff.report.data import StoredRun
from bakeoff.report.page import cell, definitions, kind_page, not_ok_list


def verdict_words(v: dict[str, Any]) -> str:
    """One verdict in words: a winner only where it is separated from the reference."""
    winner, base, ratio = v["winner"], v["baseline"], v["ratio"]
    if not winner:
        return f"no winner ({v['reason']})"
    if v["objective"] == "peak_memory":
        low = f"{winner} the lowest"
        if ratio and winner != base:
            low += f", {ratio['value']:.2f}x less than the reference {base}"
        return low + (f" ({v['reason']})" if v["ties"] else "")
    if winner == base:
        return f"{winner}, the reference: no stack beat it"
    if not ratio:  # the reference was not run (--stacks without it), or is not ok
        return f"{winner}, with no ratio: the reference {base} has no figure to compare with"
    gain = f"{ratio['value']:.2f}x (CI {ratio['ci95'][0]:.2f}-{ratio['ci95'][1]:.2f})"
    if any(base in tie and winner in tie for tie in v["ties"]):
        return (
            f"no stack beat the reference {base}: the leader {winner} measured {gain}, "
            "not separated from it"
        )
    return f"{winner}, {gain} over the reference {base}"


OBJECTIVES = {
    "samples_per_s": "highest samples/s",
    "time_to_target": "fastest to the target",
    "peak_memory": "lowest peak memory",
}


def _e(value: Any) -> str:
    return escape(str(value))


def _ci(figure: dict[str, Any] | None) -> str:
    if not figure:
        return "-"
    lo, hi = figure["ci95"]
    return f"{num(figure['value'])} [{num(lo)}–{num(hi)}]"


def _colors(cands: list[dict[str, Any]]) -> dict[str, str]:
    """One color per stack, the same in every chart."""
    return {c["id"]: charts.color(i) for i, c in enumerate(cands)}


def _verdicts(doc: dict[str, Any]) -> str:
    out = []
    for v in doc["verdicts"]:
        css = "verdict" if v["winner"] else "verdict none"
        if v["winner"] and v["ties"]:
            css = "verdict open"
        what = OBJECTIVES.get(v["objective"], v["objective"])
        out.append(
            f'<div class="{css}"><p class="headline"><b>{_e(what)}'
            f"</b>: {_e(verdict_words(v))}</p>"
            + (f"<details><summary>why</summary>{_e(v['reason'])}</details>" if v["reason"] else "")
            + "</div>"
        )
    return "".join(out)


def _bars(doc: dict[str, Any], colors: dict[str, str]) -> str:
    cands = doc["candidates"]
    ok = [c for c in cands if c["samples_per_s"]]
    parts = []
    if ok:
        parts.append(
            charts.bars(
                "train-throughput",
                "Samples/s over the interleaved rounds (95% bootstrap CI)",
                [charts.estimate_bar(c, "samples_per_s", colors[c["id"]]) for c in ok],
                "samples/s (higher is better)",
            )
        )
    mem = [c for c in cands if c["peak_rss_mb"]]
    if mem:
        parts.append(
            charts.bars(
                "train-memory",
                "Peak resident memory, all of a stack's processes together",
                [
                    Bar(
                        c["id"],
                        c["peak_rss_mb"]["sum"],
                        note=f" ({len(c['peak_rss_mb']['ranks'])} ranks)"
                        if "ranks" in c["peak_rss_mb"]
                        else "",
                        color=colors[c["id"]],
                    )
                    for c in mem
                ],
                "MiB (lower is better)",
            )
        )
    ttt = [c for c in cands if c["time_to_target_s"]]
    if ttt:
        target = doc["workload"]["target"]
        parts.append(
            charts.bars(
                "train-time-to-target",
                f"Time to {target['metric']} {target['value']:g} over seeds "
                "(olympic mean or mean; compile and evaluation apart)",
                [
                    Bar(
                        c["id"],
                        c["time_to_target_s"]["score"],
                        note=f" (spread {num(c['time_to_target_s']['spread'])})",
                        color=colors[c["id"]],
                    )
                    for c in ttt
                ],
                "seconds of training (lower is better)",
            )
        )
    return "".join(parts) or "<p>No stack was measured.</p>"


def _curves(doc: dict[str, Any], colors: dict[str, str]) -> str:
    """Seed 0's loss at every step and its validation metric at every evaluation."""
    losses, metrics = [], []
    for c in doc["candidates"]:
        if not c["seeds"]:
            continue
        seed = c["seeds"][0]
        steps = list(range(1, len(seed["losses"]) + 1))
        losses.append(Curve(c["id"], [float(s) for s in steps], seed["losses"], colors[c["id"]]))
        if seed["evals"]:
            metrics.append(
                Curve(
                    c["id"],
                    [float(e[0]) for e in seed["evals"]],
                    [float(e[1]) for e in seed["evals"]],
                    colors[c["id"]],
                )
            )
    if not losses:
        return "<p>No stack trained its seeds.</p>"
    metric = doc["workload"]["target"]["metric"]
    return charts.curves(
        "train-loss", "Training loss, seed 0 of each stack", losses, "step", "loss", log_y=True
    ) + (
        charts.curves(
            "train-metric",
            f"Validation {metric}, seed 0 of each stack",
            metrics,
            "step",
            metric,
        )
        if metrics
        else ""
    )


def _table(doc: dict[str, Any]) -> str:
    wl = doc["workload"]
    head = (
        "stack", "status", "processes × threads", "samples/s [95% CI]", "tokens/s",
        "data wait", f"time to {wl['target']['metric']} {wl['target']['value']:g}",
        f"final {wl['target']['metric']}", "peak MiB (sum)", "GFLOP/s (of peak)",
        "compile s", "checkpoint", "trainable parameters",
    )  # fmt: skip
    rows = []
    for c in doc["candidates"]:
        ttt, final, ck, eff = (
            c["time_to_target_s"], c["final_metric"], c["checkpoint"], c.get("efficiency")
        )  # fmt: skip
        cells = [
            c["id"],
            c["status"],
            f"{c['processes']} × {c['threads_per_process']}",
            _ci(c["samples_per_s"]),
            _ci(c.get("tokens_per_s")),
            "-" if c["data_wait_share"] is None else f"{c['data_wait_share']:.1%}",
            "-"
            if not ttt
            else f"{num(ttt['score'])} s ({ttt['method']}, spread {num(ttt['spread'])})",
            "-" if not final else f"{final['mean']:.4f} (spread {final['spread']:.4f})",
            "-" if not c["peak_rss_mb"] else num(c["peak_rss_mb"]["sum"]),
            "-" if not eff else f"{num(eff['achieved_gflops'])} ({eff['fraction']:.1%})",
            "-" if c["compile_s"] is None else num(c["compile_s"]),
            "-"
            if not ck
            else f"save {num(ck['save_s'] * 1e3)} ms, load {num(ck['load_s'] * 1e3)} ms, "
            f"{num(ck['size_mb'])} MiB, reload "
            + ("identical" if ck["reload_identical"] else "DIFFERS"),
            "-" if c["trainable_parameters"] is None else f"{c['trainable_parameters']:,}",
        ]
        rows.append(
            f'<tr><td>{_e(cells[0])}</td><td class="{_e(c["status"])}">{_e(cells[1])}</td>'
            + "".join(f'<td class="num">{_e(x)}</td>' for x in cells[2:])
            + "</tr>"
        )
    return (
        "<table><tr>"
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr>"
        + "".join(rows)
        + "</table>"
    )


def _scaling(doc: dict[str, Any]) -> str:
    rows = []
    for c in doc["candidates"]:
        sc = c.get("scaling")
        if not sc:
            continue

        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"

        comm = sc["communication_share"]
        rows.append(
            f"<tr><td>{_e(c['id'])}</td>"
            f"<td class='num'>{f(sc.get('efficiency_vs_one_process'))}</td>"
            f"<td class='num'>{f(sc.get('efficiency_vs_one_thread'))}</td>"
            f"<td class='num'>{f(sc.get('efficiency_vs_one_node'))}</td>"
            f"<td class='num'>{'-' if comm is None else f'{comm:.0%}'}</td>"
            f"<td>{_e(sc.get('reason') or '')}</td></tr>"
        )
    if not rows:
        return ""
    return (
        "<table><tr><th>stack</th><th>vs itself in 1 process, same threads</th>"
        "<th>vs processes × its 1-thread rate</th>"
        "<th>across nodes: vs nodes × itself in 1 rank on one node</th>"
        "<th>communication share of step time</th>"
        "<th>notes</th></tr>" + "".join(rows) + "</table>"
    )


def _schedule_words(wl: dict[str, Any]) -> str:
    """The schedule where the rate is not constant (runs before schedules had none)."""
    kind, warmup = wl.get("lr_schedule", "constant"), wl.get("warmup_steps", 0)
    words = [] if kind == "constant" else [f"{kind} towards 0 over the steps"]
    if warmup:
        words.append(f"{warmup} warm-up steps")
    return "; " + ", ".join(words) if words else ""


def _recipe(doc: dict[str, Any]) -> str:
    wl, env = doc["workload"], doc["environment"]
    rows = {
        "recipe": wl["name"],
        "data": wl.get("data") or "-",
        "rows": f"{wl['train_rows']} training, {wl['validation_rows']} validation",
        "optimizer": f"{wl['optimizer']}, lr {wl['lr']:g}"
        + (
            "; " + ", ".join(f"{k} lr {v:g}" for k, v in wl["stack_lr"].items())
            if wl.get("stack_lr")
            else ""
        )
        + _schedule_words(wl),
        "global batch": wl["global_batch"],
        "steps": f"{wl['max_steps']}, evaluated every {wl['eval_every']}",
        "reference stack": wl.get("reference", "torch"),
        "seeds": env.get("seeds"),
        "threads": env.get("threads"),
        "CPU": (env.get("cpu") or {}).get("model")
        if isinstance(env.get("cpu"), dict)
        else env.get("cpu"),
        "Python": env.get("python"),
        "bakeoff": env.get("bakeoff_version"),
    }
    return definitions(rows)


def render(run: StoredRun) -> str:
    return kind_page(
        run, f"bakeoff training report: {run.record.get('workload')} ({run.run_id})", _sections
    )


def _sections(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    colors = _colors(doc["candidates"])
    return [
        ("verdict", "Verdict", _verdicts(doc)),
        ("speed-memory", "Speed, memory and time to target", _bars(doc, colors)),
        ("curves", "Loss and validation curves", _curves(doc, colors)),
        ("results", "All stacks", _table(doc)),
        ("scaling", "Scaling", _scaling(doc)),
        (
            "not-ok",
            "Flagged, diverged, failed and unavailable",
            not_ok_list(doc["candidates"], "<p>Every stack ran.</p>"),
        ),
        ("recipe", "Recipe and machine", _recipe(doc)),
    ]


def markdown(run: StoredRun) -> str:
    doc = run.document
    lines = [f"## bakeoff train: {cell(run.record.get('workload'))} (run `{run.run_id}`)", ""]
    if doc is None:
        return "\n".join([*lines, f"Run status: **{run.record['status']}**; no result.", ""])
    for v in doc["verdicts"]:
        lines.append(
            f"- **{OBJECTIVES.get(v['objective'], v['objective'])}**: {cell(verdict_words(v))}"
        )
    wl = doc["workload"]
    metric = wl["target"]["metric"]
    lines += [
        "",
        f"| stack | status | samples/s [95% CI] | time to {metric} {wl['target']['value']:g} | "
        f"final {metric} | peak MiB | checkpoint reload |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in doc["candidates"]:
        ttt, final, ck = c["time_to_target_s"], c["final_metric"], c["checkpoint"]
        lines.append(
            "| "
            + " | ".join(
                cell(x)
                for x in (
                    c["id"],
                    c["status"],
                    _ci(c["samples_per_s"]),
                    "-" if not ttt else f"{num(ttt['score'])} s",
                    "-" if not final else f"{final['mean']:.4f}",
                    "-" if not c["peak_rss_mb"] else num(c["peak_rss_mb"]["sum"]),
                    "-" if not ck else ("identical" if ck["reload_identical"] else "DIFFERS"),
                )
            )
            + " |"
        )
    return "\n".join([*lines, ""])
