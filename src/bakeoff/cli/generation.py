"""`bakeoff run` on a text-generation workload: the options it takes, and its table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from bakeoff import api
from bakeoff.cli.output import err, out
from bakeoff.errors import UserError
from bakeoff.report.fit import fitted
from bakeoff.report.generation import COLUMNS, headlines, row_cells
from bakeoff.workload import GenerationWorkload


def refuse_inference_flags(given: dict[str, bool]) -> None:
    """Flags of the inference bake-off that a generative one does not take (yet)."""
    named = [flag for flag, is_given in given.items() if is_given]
    if named:
        raise UserError(
            f"{', '.join(named)}: not for a text-generation workload (it takes --runtimes, "
            "--precisions, --quick, --budget, --concurrency, --scenario latency|server, "
            "--slo, --threads, --trial-timeout, --json and --store)"
        )


def concurrency_option(value: str | None) -> dict[str, Any]:
    """--concurrency as GenerateOptions' field: absent, the default sweep; "0", none."""
    if value is None:
        return {}
    try:
        levels = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        levels = (-1,)
    if levels == (0,):
        return {"concurrency": ()}
    if not levels or any(n < 2 for n in levels) or len(set(levels)) != len(levels):
        raise UserError(
            f"--concurrency: distinct whole numbers of at least 2, comma-separated (one at a "
            f"time is the TPOT rounds' own), or 0 to skip the sweep; not {value!r}"
        )
    return {"concurrency": tuple(sorted(levels))}


def scenario_options(scenario: str, slo: str | None) -> dict[str, Any]:
    """--scenario and --slo as GenerateOptions' fields: server measures the highest
    request rate within the target after the TPOT race."""
    from bakeoff.generation.server_scenario import parse_slo

    if scenario == "server":
        return {"scenario": "server", "slo": parse_slo(slo)}
    if slo is not None:
        raise UserError("--slo: the target of --scenario server; add --scenario server")
    return {}


def run(
    workload: GenerationWorkload,
    opts: api.GenerateOptions,
    json_path: Path | None,
) -> int:
    result = api.run_generation(workload, opts, lambda text: err.print(escape(text)))
    return _finish(result, json_path)


def _finish(result: api.GenerateResult, json_path: Path | None) -> int:
    print_generation(result.document)
    if json_path is not None:
        api.write_json(result.document, json_path)
        err.print(f"wrote {json_path}")
    return result.exit_code


def resume(run_id: str, store: Path, json_path: Path | None) -> int:
    """`bakeoff run --resume RUN_ID` of a text-generation run."""
    result = api.resume_generation(run_id, store, lambda text: err.print(escape(text)))
    return _finish(result, json_path)


def print_generation(doc: dict[str, Any]) -> None:
    wl = doc["workload"]
    lengths = wl["prompt_tokens"]
    table = Table(title=f"bakeoff {doc['run_id']} - {wl['name']} (greedy, batch 1)")
    for col in COLUMNS:
        left = col in ("candidate", "status")
        # The ids and statuses whole; the figures wrap first on a narrow terminal.
        table.add_column(col, justify="left" if left else "right", no_wrap=left)
    for c in doc["candidates"]:
        table.add_row(*row_cells(c))
    out.print(fitted(table, out.width))
    out.print(
        f"  prompts: {wl['prompts']}, {lengths['min']:.0f}-{lengths['max']:.0f} tokens "
        f"(median {lengths['p50']:.0f}); {wl['max_new_tokens']} new tokens each; reference "
        f"perplexity {doc['reference']['perplexity']:.2f} on {wl['perplexity_tokens']} "
        "held-out tokens",
        highlight=False,
    )
    # Documents from before prompts could be left out have no such key.
    for gone in doc["reference"].get("prompts_left_out", []):
        out.print(
            f"  prompt {gone['prompt']} ({gone['prompt_tokens']} tokens): left out of the quality "
            f"check, the reference's worker failed on it: {escape(gone['reason'])}",
            highlight=False,
        )
    for c in doc["candidates"]:
        if c["status"] != "ok":
            out.print(f"  {c['id']}: {c['status']}: {escape(c['reason'])}", highlight=False)
    _print_concurrency(doc)
    _print_server(doc)
    out.print("Verdict")
    for what, words in headlines(doc):
        out.print(f"  {what}: {escape(words)}", highlight=False)


def _print_concurrency(doc: dict[str, Any]) -> None:
    """Tokens/s and TTFT p99 by requests submitted together (1: the TPOT rounds)."""
    swept = [c for c in doc["candidates"] if c.get("concurrency")]
    if not swept:
        return
    levels = sorted({int(k) for c in swept for k in c["concurrency"]})
    table = Table(title="under concurrency: tokens/s [95% CI] / TTFT p99 ms, by requests at once")
    table.add_column("candidate", no_wrap=True)
    for level in levels:
        table.add_column(str(level), justify="right")
    table.add_column("batching")
    for c in swept:
        cells = []
        for level in levels:
            lv = c["concurrency"].get(str(level))
            if lv is None:
                cells.append("-")
                continue
            rate, ttft = lv["tokens_per_s"], lv["ttft_ms"]
            lo, hi = rate["ci95"]
            cells.append(f"{rate['value']:.0f} [{lo:.0f}-{hi:.0f}] / {ttft['p99']:.1f}")
        table.add_row(c["id"], *cells, escape(str(c["settings"].get("batching", ""))))
    out.print(fitted(table, out.width))
    for c in swept:
        if c.get("concurrency_lost"):
            out.print(f"  {c['id']}: {escape(c['concurrency_lost'])}", highlight=False)


def _print_server(doc: dict[str, Any]) -> None:
    """The server scenario: each engine's highest rate within the target, then every
    rate it was sent."""
    served = [c for c in doc["candidates"] if c.get("server")]
    target = doc["verdict"].get("server_rate", {}).get("target")
    if not served or target is None:
        return
    table = Table(
        title=f"server scenario: Poisson arrivals; target p99 TTFT {target['ttft_p99_ms']:.4g} ms, "
        f"p99 TPOT {target['tpot_p99_ms']:.4g} ms"
    )
    for col in ("candidate", "highest rate /s", "goodput /s [95% CI]", "missed at /s", "batching"):
        table.add_column(col, justify="left" if col in ("candidate", "batching") else "right")
    for c in served:
        top = c["server"].get("highest_rate")
        if top is None:
            cells = ["-", "-", _rate(c["server"].get("lowest_missed"))]
        else:
            good = top["goodput"]
            lo, hi = good["ci95"]
            cells = [
                f"{top['requests_per_s']:.3g}",
                f"{good['value']:.3g} [{lo:.3g}-{hi:.3g}]",
                _rate(c["server"].get("lowest_missed")),
            ]
        why = c["server"].get("lost") or c["server"].get("batching", "")
        table.add_row(c["id"], *cells, escape(str(why)))
    out.print(fitted(table, out.width))
    rates = Table(title="each rate sent: p50 / p99 ms")
    for col in ("candidate", "rate /s", "TTFT", "TPOT", "goodput /s", "tokens/s", "running", "met"):
        rates.add_column(col, justify="left" if col == "candidate" else "right")
    for c in served:
        for step in sorted(c["server"].get("tested", []), key=lambda s: (s["rate"], s["seed"])):
            rates.add_row(
                c["id"],
                f"{step['rate']:.3g}",
                f"{step['ttft_ms']['p50']:.3g} / {step['ttft_ms']['p99']:.3g}",
                f"{step['tpot_ms']['p50']:.3g} / {step['tpot_ms']['p99']:.3g}",
                f"{step['goodput']:.3g}",
                f"{step['output_tokens_per_s']:.0f}",
                f"{step['mean_running']:.2g}",
                "yes" if step["met"] else "no",
            )
    out.print(fitted(rates, out.width))


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
