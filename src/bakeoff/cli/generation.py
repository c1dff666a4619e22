"""`bakeoff run` on a text-generation workload: the options it takes, and its table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from bakeoff import api
from bakeoff.cli.output import err, out
from bakeoff.errors import UserError
from bakeoff.workload import GenerationWorkload


def refuse_inference_flags(given: dict[str, bool]) -> None:
    """Flags of the inference bake-off that a generative one does not take (yet)."""
    named = [flag for flag, is_given in given.items() if is_given]
    if named:
        raise UserError(
            f"{', '.join(named)}: not for a text-generation workload (it takes --runtimes, "
            "--precisions, --quick, --budget, --threads, --trial-timeout, --json and --store)"
        )


def run(
    workload: GenerationWorkload,
    opts: api.GenerateOptions,
    json_path: Path | None,
) -> int:
    result = api.run_generation(workload, opts, lambda text: err.print(escape(text)))
    print_generation(result.document)
    if json_path is not None:
        api.write_json(result.document, json_path)
        err.print(f"wrote {json_path}")
    return result.exit_code


def _pct(figure: dict[str, Any] | None, key: str) -> str:
    if not figure:
        return "-"
    lo, hi = figure["ci95"][key]
    mark = "?" if key in figure["unsupported"] else ""
    return f"{figure[key]:.3f}{mark} [{lo:.3f}-{hi:.3f}]"


def _quality(q: dict[str, Any] | None) -> str:
    if not q:
        return "-"
    return (
        f"{q['token_agreement']:.0%} agree, ppl {q['perplexity']:.2f} ({q['perplexity_rise']:+.1%})"
    )


def print_generation(doc: dict[str, Any]) -> None:
    wl = doc["workload"]
    lengths = wl["prompt_tokens"]
    table = Table(title=f"bakeoff {doc['run_id']} - {wl['name']} (greedy, batch 1)")
    for col in (
        "candidate",
        "status",
        "TPOT p50 ms [95% CI]",
        "TTFT p50 ms [95% CI]",
        "TTFT p99 ms",
        "tokens/s [95% CI]",
        "quality",
        "peak MB",
        "size MB",
        "build / load / first token s",
    ):
        left = col in ("candidate", "status")
        # The ids and statuses whole; the figures wrap first on a narrow terminal.
        table.add_column(col, justify="left" if left else "right", no_wrap=left)
    for c in doc["candidates"]:
        rate = c["tokens_per_s"]
        cold = c["cold_start_s"]
        table.add_row(
            c["id"],
            c["status"] + (f", {c['validity']}" if c["validity"] not in ("", "valid") else ""),
            _pct(c["tpot_ms"], "p50"),
            _pct(c["ttft_ms"], "p50"),
            _pct(c["ttft_ms"], "p99"),
            "-"
            if not rate
            else f"{rate['value']:.1f} [{rate['ci95'][0]:.1f}-{rate['ci95'][1]:.1f}]",
            _quality(c["quality"]),
            "-" if c["peak_rss_mb"] is None else f"{c['peak_rss_mb']:.0f}",
            "-" if c["model_size_mb"] is None else f"{c['model_size_mb']:.2f}",
            "-"
            if cold["load"] is None
            else f"{cold['build'] or 0:.1f} / {cold['load']:.1f} / {cold['first_token'] or 0:.3f}",
        )
    out.print(table)
    out.print(
        f"  prompts: {wl['prompts']}, {lengths['min']:.0f}-{lengths['max']:.0f} tokens "
        f"(median {lengths['p50']:.0f}); {wl['max_new_tokens']} new tokens each; reference "
        f"perplexity {doc['reference']['perplexity']:.2f} on {wl['perplexity_tokens']} "
        "held-out tokens",
        highlight=False,
    )
    for c in doc["candidates"]:
        if c["status"] != "ok":
            out.print(f"  {c['id']}: {c['status']}: {escape(c['reason'])}", highlight=False)
    v = doc["verdict"]["tpot_batch_1"]
    out.print("Verdict")
    out.print(f"  time per output token at batch 1: {escape(v['headline'])}", highlight=False)
    conc = doc["verdict"]["tokens_per_s_concurrency"]
    out.print(f"  tokens/s under concurrency: {escape(conc['reason'])}", highlight=False)
