"""`bakeoff run WORKLOAD --cluster ...`: the bake-off on a node of a Ray cluster, or with
`--per-node-type` on one node of each machine type, with what each answer costs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from bakeoff import api
from bakeoff.cli.output import err, out
from bakeoff.cli.sweep import Progress
from bakeoff.errors import UserError
from bakeoff.report.fit import fitted


def run_on_cluster(
    workload: str,
    opts: api.RunOptions,
    cluster: str | None,
    cluster_tmp: Path | None,
    per_node_type: bool,
    cost_file: Path | None,
    split: bool = False,
) -> int:
    """The exit code: 0 when every run finished and named a winner."""
    from bakeoff.cluster.per_type import cross_type, read_costs
    from bakeoff.cluster.sweep import RUN_OPTIONS, SweepOptions, run_sweep
    from bakeoff.report.terminal import print_result
    from bakeoff.store import Store

    if opts.threads is not None:
        raise UserError("--threads: on a cluster each node's runs take its own cores")
    workload = api.workload_ref(workload)  # as the nodes will load it
    if split and per_node_type:
        raise UserError("--split spreads one bake-off over identical nodes: not --per-node-type")
    prices, objective = read_costs(workload, cost_file)
    if (prices or cost_file) and not per_node_type:
        raise UserError("[cost] and --cost-file price machine types: add --per-node-type")
    run_options = {
        f.name: getattr(opts, f.name) for f in dataclasses.fields(opts) if f.name in RUN_OPTIONS
    }
    if split:
        from bakeoff.cluster.split import run_split

        keys, baseline = api.plan_shares(workload, opts)
        doc = run_split(
            workload, run_options, keys, baseline, cluster, cluster_tmp, Path(opts.store),
            Progress(),
        )  # fmt: skip
        print_split(doc)
        _write(opts.json_path, doc)
        done = all(n["status"] == "done" for n in doc["nodes"])
        return 0 if done and doc["verdicts"] else 1
    sweep_opts = SweepOptions(
        cluster=cluster,
        cluster_tmp=cluster_tmp,
        store=Path(opts.store),
        run_options=run_options,
        per_node_type=per_node_type,
    )
    result = run_sweep([workload], sweep_opts, Progress())
    with Store(Path(opts.store).resolve()) as store:
        if not per_node_type:
            [run] = result.document["runs"]
            if run["run_id"] is None:
                raise UserError(f"{workload}: the run on the cluster failed: {run['reason']}")
            doc = store.run(run["run_id"])["document"]
            print_result(doc, out)
            _write(opts.json_path, doc)
            return 0 if result.exit_code == 0 and all(v["winner"] for v in doc["verdicts"]) else 1
        cross = cross_type(result.document, store, prices, objective)
    print_per_type(cross)
    _write(opts.json_path, cross)
    return result.exit_code


def _write(path: str | Path | None, doc: dict[str, Any]) -> None:
    if path is not None:
        api.write_json(doc, Path(path))
        err.print(f"wrote {path}")


def _figure(fig: dict[str, Any] | None, key: str, fmt: str) -> str:
    if not fig or fig.get(key) is None:
        return "-"
    ci = fig.get("ci95")
    span = f" [{ci[0]:{fmt}}-{ci[1]:{fmt}}]" if ci else ""
    return f"{fig[key]:{fmt}}{span}"


def print_per_type(doc: dict[str, Any]) -> None:
    """The cross-type table: absolute figures per machine type (never compared as if
    measured side by side), cost where priced; then each type's own verdicts."""
    table = Table(title=f"{doc['workload']}: one node of each machine type ({doc['sweep_id']})")
    for col in ("machine type", "candidate", "status", "p50 ms [95% CI]", "samples/s [95% CI]",
                "USD per million [95% CI]"):  # fmt: skip
        table.add_column(col, no_wrap=col in ("machine type", "candidate"))
    for r in doc["candidates"]:
        table.add_row(
            r["node_type"],
            r["id"],
            r["status"],
            _figure(r["latency_ms"], "value", ".3g"),
            _figure(r["throughput"], "samples_per_s", ".4g"),
            _figure(r["cost"], "usd_per_million", ".4g"),
        )
    out.print(fitted(table, out.width))
    for node_type, t in doc["types"].items():
        if t["status"] != "done":
            out.print(f"  {node_type}: {t['status']}: {escape(t['reason'])}", highlight=False)
        for v in t["verdicts"]:
            out.print(
                f"  {node_type}, batch {v['batch_size']}: {escape(v['headline'] or '')}",
                highlight=False,
            )
    if doc["unpriced_types"]:
        out.print(f"  no price for: {', '.join(doc['unpriced_types'])}", highlight=False)
    if "cost_verdict" in doc:
        out.print(f"Cheapest: {escape(doc['cost_verdict']['reason'])}", highlight=False)


def print_split(doc: dict[str, Any]) -> None:
    """Each candidate's time against the baseline on its own node, and the leaders."""
    table = Table(title=f"{doc['workload']}: split over {len(doc['nodes'])} node(s)")
    for col in ("candidate", "nodes", "status", "time / baseline [95% CI]", "decision"):
        table.add_column(col, no_wrap=col == "candidate")
    for c in doc["candidates"]:
        r = c.get("ratio")
        ratio = f"{r['ratio']:.3f} [{r['ci'][0]:.3f}-{r['ci'][1]:.3f}]" if r else "-"
        table.add_row(
            c.get("id") or c["key"],
            ", ".join(n[:8] for n in c["node_ids"]),
            c["status"],
            ratio,
            escape(r["decision"] if r else c["reason"]),
        )
    out.print(fitted(table, out.width))
    for n in doc["nodes"]:
        if n["status"] != "done":
            out.print(f"  node {n['node_id'][:8]}: {escape(n['reason'])}", highlight=False)
    for v in doc["verdicts"]:
        out.print(f"  batch {v['batch_size']}: {escape(v['headline'])}", highlight=False)
