"""`bakeoff report --format md`: a compact Markdown summary for a pull request."""

from __future__ import annotations

from typing import Any

from bakeoff.judge.verdict_words import statement
from bakeoff.report.charts import num
from bakeoff.report.data import StoredRun, flagged, leaders, status_label


def _cell(value: Any) -> str:
    """Table-safe text: a `|` or a line break would split the row."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def _ci(ci: list[float] | None) -> str:
    return "" if not ci else f" [{num(ci[0])}–{num(ci[1])}]"


def _mark(winner: bool | None) -> str:
    """★ a winner; ☆ a leader not separated from the others or the baseline."""
    return "" if winner is None else " ★" if winner else " ☆"


def render(run: StoredRun) -> str:
    doc = run.document or {}
    wl = doc.get("workload") or {}
    name = wl.get("name") or run.record.get("workload")
    lines = [f"## bakeoff: {_cell(name)} (run `{run.run_id}`)", ""]
    if run.document is None:
        lines += [
            f"Run status: **{run.record['status']}**; no verdict. "
            f"`{run.resume_command}` finishes it.",
            "",
        ]
    lines += _verdicts(run.verdicts)
    lines += _table(run)
    lines += _out_of_race(run)
    lines += _environment(run)
    return "\n".join(lines)


def _verdicts(verdicts: list[dict[str, Any]]) -> list[str]:
    """Each verdict's first sentence and points; their statistics folded away below."""
    lines = ["### Verdict", ""]
    statistics = []
    for v in verdicts:
        head, points, details = statement(v)
        lines.append(f"- **batch {v['batch_size']}** ({v['objective']}): {_cell(head)}")
        lines += [f"  - {_cell(p)}" for p in points]
        if details:
            statistics += [f"**batch {v['batch_size']}**", ""]
            statistics += [f"- {_cell(d)}" for d in details] + [""]
    if statistics:
        lines += ["", "<details><summary>Statistics behind the verdicts</summary>", ""]
        lines += [*statistics, "</details>"]
    return lines


def _table(run: StoredRun) -> list[str]:
    """The candidates that passed or failed the quality gate, one row each."""
    led = leaders(run.verdicts)
    lines = [
        "",
        "| candidate | status | quality | p50 ms [95% CI] | samples/s [95% CI] | size MiB |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for c in run.candidates:
        if c["status"] not in ("ok", "rejected"):
            continue
        lat, thr, q = c.get("latency_ms"), c.get("throughput"), c.get("quality")
        size = c.get("model_size_mb")
        cells = [
            f"`{c['id']}`" + _mark(led.get(c["id"])),
            status_label(c),
            "–" if not q or q.get("value") is None else f"{q['value']:.4f}",
            "–" if not lat else num(lat["p50"]) + _ci(lat["ci95"]["p50"]),
            "–" if not thr else num(thr["samples_per_s"]) + _ci(thr["ci95"]),
            "–" if size is None else f"{size:.3f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if led:
        lines += ["", "★ winner; ☆ leads, but not separated from the others (see the verdict)"]
    return lines


def _out_of_race(run: StoredRun) -> list[str]:
    """Flagged results, the candidates out of the race, what was left out, and notes."""
    lines: list[str] = []
    shaky = flagged(run.candidates)
    if shaky:
        lines += ["", "Flagged (measured, but not to be taken as it is):", ""]
        lines += [f"- `{c['id']}` {c['validity']}: {_cell(c['validity_reason'])}" for c in shaky]
    out_of_race = [
        c for c in run.candidates if c["status"] in ("rejected", "failed", "unavailable")
    ]
    if out_of_race:
        lines += ["", "<details><summary>Rejected, failed and unavailable</summary>", ""]
        lines += [f"- `{c['id']}` {c['status']}: {_cell(c['reason'])}" for c in out_of_race]
        lines += ["", "</details>"]
    left_out = ((run.document or {}).get("settings") or run.settings).get("left_out") or {}
    if left_out:
        lines += ["", "Left out (not built):", ""]
        lines += [f"- `{vid}`: {_cell(why)}" for vid, why in left_out.items()]
    noted = [c for c in run.candidates if c.get("notes") and c["status"] in ("ok", "rejected")]
    if noted:
        lines += ["", "Notes:", ""]
        lines += [f"- `{c['id']}`: {_cell('; '.join(c['notes']))}" for c in noted]
    return lines


def _environment(run: StoredRun) -> list[str]:
    """The machine and the run's settings, in one small line."""
    env, st = run.environment, run.settings
    cpu = env.get("cpu") or {}
    pkgs = env.get("packages") or {}
    runtimes = ", ".join(f"{k} {v}" for k, v in pkgs.items() if v and k != "numpy")
    gpu = env.get("gpu")
    if isinstance(gpu, list):
        gpu = ", ".join(str(g.get("name") if isinstance(g, dict) else g) for g in gpu)
    return [
        "",
        f"<sub>{_cell(cpu.get('model'))}, {cpu.get('physical_cores')} cores, "
        f"{env.get('memory_gb')} GiB, GPU {_cell(gpu or 'none')}; Python "
        f"{env.get('python')}; {_cell(runtimes)}; threads {st.get('threads')}, "
        f"{'quick' if st.get('quick') else 'full'} run, margin {st.get('margin', 0.02):.0%}"
        "</sub>",
        "",
    ]
