"""`bakeoff run WORKLOAD --cluster ... --per-node-type`: the same workload measured on one
node of each machine type the cluster has, and what each answer costs.

It is a sweep of one workload with one entry per machine type (`run_sweep` with
`per_node_type`), so it is resumable and a lost node's run goes to another node of
the same type. Each type's run is an ordinary run with its own verdicts: figures of
two machine types are never compared as if measured side by side. Across types
this module gives a table of absolute latency and throughput with their CIs, and,
where `[cost] usd_per_hour` (or `--cost-file`) prices a type, each ok candidate's
USD per million inferences at its measured throughput:

    usd_per_million = usd_per_hour / (samples_per_s * 3600) * 1e6

with the interval that the throughput's CI gives. With `[search] objective =
"cost"` the cheapest eligible stack-and-machine is named, the lowest point
estimate, with the candidates whose cost intervals overlap its own: machines of
different types are not paired, so nothing stronger can be said.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bakeoff.errors import UserError
from bakeoff.store import Store
from bakeoff.user_files import read_text
from bakeoff.workload import CostSpec, parse_spec_file

SCHEMA_VERSION = 1  # the per-node-type document. 1: the first


def read_costs(workload: str, cost_file: Path | None) -> tuple[dict[str, float], str]:
    """The prices by machine type: `--cost-file` (a TOML file with `usd_per_hour`,
    bare or under `[cost]`) over the workload's own `[cost]`; and the objective its
    `[search]` names ("auto" where the workload cannot be read here: a built-in)."""
    objective = "auto"
    prices: dict[str, float] = {}
    if not workload.startswith("builtin:"):
        spec = parse_spec_file(Path(workload))
        objective = spec.search.objective
        if spec.cost is not None:
            prices = dict(spec.cost.usd_per_hour)
    if cost_file is not None:
        shape = 'a TOML file with usd_per_hour = { "machine-type" = USD, ... }'
        text = read_text(cost_file, f"--cost-file {cost_file}", f"give {shape}")
        try:
            raw = tomllib.loads(text)
        except (ValueError, RecursionError) as exc:  # TOMLDecodeError is a ValueError
            raise UserError(
                f"--cost-file {cost_file}: not valid TOML ({exc}); give {shape}"
            ) from None
        table = raw.get("cost", raw)
        try:
            prices = dict(CostSpec.model_validate(table).usd_per_hour)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise UserError(
                f"--cost-file {cost_file}: {where}: {first['msg'].removeprefix('Value error, ')}"
                f"; give {shape}"
            ) from None
    if objective == "cost" and not prices:
        raise UserError(
            f'{workload}: objective = "cost" needs prices: [cost] usd_per_hour = '
            '{ "machine-type" = USD, ... } in the workload, or --cost-file'
        )
    return prices, objective


def _per_million(usd_per_hour: float, samples_per_s: float) -> float:
    return usd_per_hour / (samples_per_s * 3600) * 1e6


def cost_of(samples_per_s: dict[str, Any] | None, usd_per_hour: float) -> dict[str, Any] | None:
    """USD per million inferences at a measured throughput, with its interval."""
    if not samples_per_s or not samples_per_s.get("samples_per_s"):
        return None
    lo, hi = samples_per_s.get("ci95") or (samples_per_s["samples_per_s"],) * 2
    return {
        "usd_per_hour": usd_per_hour,
        "usd_per_million": _per_million(usd_per_hour, samples_per_s["samples_per_s"]),
        # the fastest end of the throughput's CI is the cheapest end of the cost's
        "ci95": [_per_million(usd_per_hour, hi), _per_million(usd_per_hour, lo)]
        if lo and hi
        else None,
    }


def cross_type(
    sweep: dict[str, Any], store: Store, prices: dict[str, float], objective: str
) -> dict[str, Any]:
    """Per machine type its run and verdicts; per candidate and type its absolute figures
    and cost; with the cost objective, the cheapest."""
    types: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for run in sweep["runs"]:
        node_type = run["for_node_type"] or run["node_type"]
        types[node_type] = {
            "run_id": run["run_id"],
            "node_id": run["node_id"],
            "status": run["status"],
            "reason": run["reason"],
            "usd_per_hour": prices.get(node_type),
            "verdicts": [],
        }
        if not run["run_id"]:
            continue
        doc = store.run(run["run_id"])["document"] or {}
        types[node_type]["verdicts"] = [
            {k: v.get(k) for k in ("batch_size", "objective", "winner", "standing", "headline")}
            for v in doc.get("verdicts", [])
        ]
        for c in doc.get("candidates", []):
            row = {
                "node_type": node_type,
                "id": c["id"],
                "status": c["status"],
                "batch_size": c.get("batch_size"),
                "latency_ms": _pick(c.get("latency_ms"), "p50"),
                "throughput": c.get("throughput"),
                "eligible": c["status"] == "ok" and not c.get("constraint_violations"),
                "cost": None,
            }
            if c["status"] == "ok" and node_type in prices:
                row["cost"] = cost_of(c.get("throughput"), prices[node_type])
            rows.append(row)
    unpriced = sorted(t for t in types if t not in prices)
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "per_node_type",
        "sweep_id": sweep["sweep_id"],
        "workload": sweep["runs"][0]["workload"] if sweep["runs"] else None,
        "types": types,
        "candidates": rows,
        "unpriced_types": unpriced,
    }
    if objective == "cost":
        document["cost_verdict"] = _cheapest(rows, unpriced)
    return document


def _pick(latency: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if not latency or latency.get(key) is None:
        return None
    return {"value": latency[key], "ci95": (latency.get("ci95") or {}).get(key)}


def _cheapest(rows: list[dict[str, Any]], unpriced: list[str]) -> dict[str, Any]:
    priced = [r for r in rows if r["eligible"] and r["cost"]]
    if not priced:
        return {
            "objective": "cost",
            "winner": None,
            "reason": "no eligible candidate on a priced machine type"
            + (f" (no price for {', '.join(unpriced)})" if unpriced else ""),
        }
    priced.sort(key=lambda r: r["cost"]["usd_per_million"])
    best = priced[0]
    best_ci = best["cost"]["ci95"] or [best["cost"]["usd_per_million"]] * 2
    overlapping = [
        f"{r['id']} on {r['node_type']}"
        for r in priced[1:]
        if r["cost"]["ci95"] and r["cost"]["ci95"][0] <= best_ci[1]
    ]
    usd = best["cost"]["usd_per_million"]
    reason = f"{best['id']} on {best['node_type']}: {usd:.4g} USD per million inferences"
    if overlapping:
        reason += f"; its interval overlaps {', '.join(overlapping)} (unpaired machines)"
    if unpriced:
        reason += f"; not priced: {', '.join(unpriced)}"
    return {
        "objective": "cost",
        "winner": {"node_type": best["node_type"], "candidate": best["id"]},
        "usd_per_million": usd,
        "ranking": [
            {
                "node_type": r["node_type"],
                "candidate": r["id"],
                "usd_per_million": r["cost"]["usd_per_million"],
            }
            for r in priced
        ],
        "overlapping": overlapping,
        "reason": reason,
    }
