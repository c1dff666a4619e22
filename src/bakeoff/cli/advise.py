"""`bakeoff advise`: the candidate stacks for a workload, each with its reason."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from bakeoff import api
from bakeoff.cli.options import WorkloadArg
from bakeoff.cli.output import out
from bakeoff.report.fit import fitted


def advise_cmd(
    workload: WorkloadArg = None,
    target: Annotated[
        str | None,
        typer.Option(
            help="server-cpu, server-gpu, edge-intel, mobile, browser or apple "
            "(default: detected from this machine)"
        ),
    ] = None,
    goal: Annotated[str | None, typer.Option(help="latency or throughput")] = None,
    train: Annotated[bool, typer.Option("--train", help="also advise on training")] = False,
    baseline_ms: Annotated[
        float | None,
        typer.Option(help="the model's measured baseline latency in ms (batch 1), if known"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the advice as JSON")] = False,
) -> None:
    """Propose candidate stacks for a workload, each with its reason, and say why others are out."""
    report = api.advise(workload, target, goal, train, baseline_ms)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        return
    source = "stated" if report.target_source == "stated" else "detected"
    out.print(
        f"[bold]advice for {report.facts.workload}[/], target {report.target} ({source})"
        + (f", goal {report.goal}" if report.goal else ""),
        highlight=False,
    )
    out.print(f"[dim]{escape(report.facts.describe())}[/]", highlight=False)
    t = Table(title="proposed candidates")
    for col in ("runtime", "precision", "methods", "reason"):
        t.add_column(col)
    for p in report.proposed:
        t.add_row(p.runtime, p.precision, ", ".join(p.methods) or "-", escape(p.reason))
    out.print(fitted(t, out.width))
    if report.excluded:
        x = Table(title="excluded")
        x.add_column("what")
        x.add_column("why")
        for e in report.excluded:
            x.add_row(escape(e.what), escape(e.why))
        out.print(x)
    notes = [a for a in report.advice if not a.proposes]
    if notes:
        out.print("[bold]Notes[/]")
        for a in notes:
            mark = "[yellow]warning:[/] " if a.warning else ""
            out.print(f"  {mark}{escape(a.text)}", highlight=False)
            out.print(f"    [dim]{escape(a.reason)}[/]", highlight=False)
