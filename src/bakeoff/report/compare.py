"""`bakeoff compare` in the terminal: the runs' differences first, since they
explain most changes, then one row per candidate (judge.compare made them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bakeoff.report.charts import num
from bakeoff.report.fit import fitted

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from bakeoff.judge.compare import Comparison

_STYLE = {"faster": "green", "slower": "red", "same": "", "undecided": "yellow"}


def print_comparison(cmp: Comparison, out: Console) -> None:
    """The comparison as text: differences first, then one row per candidate."""
    out.print(f"[bold]compare {cmp.run_a} (A) -> {cmp.run_b} (B)[/]", highlight=False)
    _differences(cmp, out)
    out.print(fitted(_table(cmp), out.width))
    for cid, why in cmp.not_compared.items():
        out.print(f"  {cid}: not compared ({why})", highlight=False)
    if cmp.only_a:
        out.print(f"only in A: {', '.join(cmp.only_a)}", highlight=False)
    if cmp.only_b:
        out.print(f"only in B: {', '.join(cmp.only_b)}", highlight=False)


def _differences(cmp: Comparison, out: Console) -> None:
    """How the runs' environments and settings differ, and each candidate's runtime settings."""
    diffs = cmp.environment + cmp.settings
    if diffs:
        out.print("[bold yellow]the runs differ in:[/]")
        for d in diffs:
            out.print(f"  {d.key}: {d.a!r} -> {d.b!r}", highlight=False)
    else:
        out.print("same environment fingerprint and settings")
    for cid, ds in cmp.runtime_settings.items():
        text = ", ".join(f"{d.key} {d.a!r} -> {d.b!r}" for d in ds)
        out.print(f"  {cid} runtime settings: {text}", highlight=False)


def _table(cmp: Comparison) -> Table:
    from rich.table import Table

    t = Table(title=f"B/A of the objective ({cmp.level:.1%} CI; 'same' within +-{cmp.margin:.0%})")
    for col in ("candidate", "objective", "A", "B", "B/A [CI]", "change"):
        t.add_column(col)
    for r in cmp.rows:
        unit = "ms p50" if r.objective == "latency" else "samples/s"
        t.add_row(
            r.candidate,
            r.objective,
            f"{num(r.a)} {unit}",
            f"{num(r.b)} {unit}",
            f"{r.ratio:.3f} [{r.ratio_lo:.3f}-{r.ratio_hi:.3f}]",
            f"[{_STYLE[r.change]}]{r.change}[/]" if _STYLE[r.change] else r.change,
        )
    return t
