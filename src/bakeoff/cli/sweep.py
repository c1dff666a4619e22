"""`bakeoff sweep WORKLOAD... --cluster ...`: whole bake-offs over a Ray cluster's nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from bakeoff import api
from bakeoff.cli.options import DEFAULT_STORE, StoreOpt
from bakeoff.cli.output import err, out
from bakeoff.errors import UserError
from bakeoff.paths import check_writable
from bakeoff.report.fit import fitted


class Progress:
    """The sweep's events on stderr."""

    def note(self, message: str) -> None:
        err.print(escape(message), highlight=False)

    def connected(self, session: Any) -> None:
        kinds = sorted({n.node_type for n in session.nodes})
        err.print(
            f"cluster {session.spec.words()}: {len(session.nodes)} node(s) ({', '.join(kinds)})",
            highlight=False,
        )

    def assigned(self, workload: str, node: Any) -> None:
        err.print(
            f"{escape(workload)}: started on node {node.node_id[:8]} ({node.node_type})",
            highlight=False,
        )


def sweep_cmd(
    workloads: Annotated[
        list[str] | None,
        typer.Argument(help="workload .toml files or builtin:NAME (with --resume: none)"),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            help="local:N or local:TYPE=N,TYPE=M (simulated nodes on this machine), or a "
            "Ray cluster's address; default: RAY_ADDRESS"
        ),
    ] = None,
    cluster_tmp: Annotated[
        Path | None,
        typer.Option(help="Ray's temp and log files (default: beside the store, a short path)"),
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="a short run of each workload")] = False,
    budget: Annotated[float | None, typer.Option(help="seconds of measuring per run")] = None,
    runtimes: Annotated[str | None, typer.Option(help="comma-separated, for every run")] = None,
    precisions: Annotated[str | None, typer.Option(help="comma-separated, for every run")] = None,
    resume: Annotated[
        str | None, typer.Option(help="finish a sweep: its finished workloads are not run again")
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the sweep's document")
    ] = None,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Run whole bake-offs, one per workload, spread over a Ray cluster's nodes.

    Each run comes back into the store as an ordinary run (bakeoff show RUN_ID),
    tagged with its node's id, type and fingerprint.
    """
    from bakeoff.cluster.sweep import SweepOptions, run_sweep

    if resume is None and not workloads:
        raise UserError("bakeoff sweep: name the workloads, or --resume SWEEP_ID")
    if resume is not None and workloads:
        raise UserError("--resume takes the sweep's own workloads: name none")
    # before the cluster starts, not once every run has come back
    if json_path is not None:
        check_writable(json_path, "--json")
    if cluster_tmp is not None:
        check_writable(cluster_tmp, "--cluster-tmp", folder=True)
    opts = SweepOptions(
        cluster=cluster,
        cluster_tmp=cluster_tmp,
        store=store,
        run_options={
            "quick": quick,
            "budget_s": budget,
            "runtimes": [r for r in runtimes.split(",") if r] if runtimes else None,
            "precisions": [p for p in precisions.split(",") if p] if precisions else None,
        },
        resume=resume,
    )
    result = run_sweep(list(workloads or []), opts, Progress())
    _print(result.document)
    if json_path is not None:
        api.write_json(result.document, json_path)
        err.print(f"wrote {json_path}")
    raise typer.Exit(result.exit_code)


def _print(doc: dict[str, Any]) -> None:
    table = Table(title=f"bakeoff sweep {doc['sweep_id']}")
    for col in ("workload", "status", "run", "winner by batch size", "speedup", "node type"):
        table.add_column(col)
    for r in doc["runs"]:
        winners = ", ".join(f"b{b}: {w}" for b, w in r["winners"].items()) or "-"
        speedups = ", ".join(f"b{b}: {s:.2f}x" for b, s in r["speedups"].items()) or "-"
        status = r["status"]
        if status != "done" and r["reason"]:
            status += f" ({r['reason']})"
        table.add_row(
            escape(r.get("name") or r["workload"]),
            escape(status),
            r["run_id"] or "-",
            escape(winners),
            speedups,
            r["node_type"] or "-",
        )
    out.print(fitted(table, out.width))
