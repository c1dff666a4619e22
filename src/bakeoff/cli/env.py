"""`bakeoff env`: this machine and the runtimes it can run."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from bakeoff import environment
from bakeoff.cli.output import out
from bakeoff.report.fit import fitted


def env(
    as_json: Annotated[
        bool, typer.Option("--json", help="print the fingerprint and runtimes as JSON")
    ] = False,
) -> None:
    """This machine's fingerprint and every runtime's availability."""
    fp = environment.fingerprint()
    rts = environment.runtimes()
    trains = environment.training_stacks()
    gens = environment.generative_runtimes()
    if as_json:
        doc = {
            "environment": fp,
            "runtimes": rts,
            "training_stacks": trains,
            "generative_runtimes": gens,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    cpu = fp["cpu"]
    out.print(
        f"[bold]bakeoff {fp['bakeoff_version']}[/] on Python {fp['python']}, {fp['platform']}"
    )
    out.print(
        f"CPU: {cpu['model']} ({cpu['physical_cores']} physical / {cpu['logical_cores']} logical "
        f"cores, flags: {', '.join(cpu['flags']) or 'none notable'})"
    )
    if "flags_simulated" in cpu:
        out.print(
            f"[yellow]CPU flags simulated[/] by BAKEOFF_CPU_FLAGS={cpu['flags_simulated']!r} "
            f"(the advice follows them; runtimes run on the real CPU: "
            f"{', '.join(cpu['detected_flags']) or 'none notable'})",
            highlight=False,
        )
    gpus = "; ".join(
        f"{g['name']} (driver {g.get('driver')}, {g.get('memory_mb', '?')} MiB)"
        for g in fp["gpu"] or []
    )
    out.print(f"memory: {fp['memory_gb']} GiB; GPU: {gpus or 'none (no CUDA device)'}")
    out.print(f"default threads per runtime: {environment.default_threads()}")
    t = Table(title="runtimes")
    for col in ("runtime", "available", "version", "why not / install"):
        t.add_column(col)
    for r in rts:
        why = "" if r["available"] else f"{r['reason']}; install: {r['install']}"
        # escape: install hints hold extras like jax[cuda13] that Rich would take for markup
        avail = "yes" if r["available"] else "[red]no[/]"
        name = escape(r["runtime"])
        if r.get("origin", "built-in") != "built-in":  # registered by another package
            name += f"\n[dim]{escape(r['origin'])}[/]"
        t.add_row(name, avail, escape(r["version"] or "-"), escape(why))
    out.print(fitted(t, out.width))
    t = Table(title="training stacks (bakeoff train)")
    for col in ("stack", "available", "version", "why not / install"):
        t.add_column(col)
    for row in trains:
        avail = "yes" if row["available"] else "[red]no[/]"
        reason = escape(row["reason"] or "")
        t.add_row(escape(row["stack"]), avail, escape(row["version"] or "-"), reason)
    out.print(fitted(t, out.width))
    t = Table(title="generative runtimes (bakeoff run on a text-generation workload)")
    for col in ("runtime", "available", "version", "environment / why not"):
        t.add_column(col)
    for row in gens:
        avail = "yes" if row["available"] else "[red]no[/]"
        where = row["environment"] if row["available"] else row["reason"]
        if row.get("server"):
            where = f"{where}; {row['server']}"
        t.add_row(escape(row["runtime"]), avail, escape(row["version"] or "-"), escape(where))
    out.print(fitted(t, out.width))
