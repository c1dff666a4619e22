"""`bakeoff run WORKLOAD --cluster ... --split`: one bake-off's candidates spread over
nodes of one fingerprint, to finish a big grid sooner.

The candidates (less the baseline) are dealt out to the nodes round-robin, and every
node runs the baseline too, in the same randomized interleaved rounds as its share
(each node's run is an ordinary local run of its share: `RunOptions.share`). So each
candidate has, on its node, paired rounds against the baseline, and only that
within-node ratio is used: figures from two nodes are never compared directly. The
ratio (candidate time / baseline time: below 1 is faster) and its CI come from
`bakeoff.judge.pooling`, whose two-stage bootstrap pools the nodes a comparison was
measured on; "faster" needs the CI clear of the margin and the nodes to agree.

Only nodes with identical fingerprints are used: the largest group of them, and the
run says which field set each other node apart. A node lost mid-run fails its
share's candidates with "node lost"; the rest of the run finishes (the baseline ran
on every node).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bakeoff.candidates import Candidate
from bakeoff.cluster.sweep import check_run_options, failure_words, import_node_run, start_runner
from bakeoff.distributed.session import Node, Session, connect, import_ray, parse_cluster, short_tmp
from bakeoff.errors import UserError
from bakeoff.inference.pipeline import share_key
from bakeoff.judge import pooling
from bakeoff.judge.thresholds import DEFAULT_MARGIN
from bakeoff.store import Store

SCHEMA_VERSION = 1  # the split run's document. 1: the first


class SplitEvents(Protocol):
    def note(self, message: str) -> None: ...

    def connected(self, session: Session) -> None: ...

    def assigned(self, workload: str, node: Node) -> None:
        """A node's share has started (`workload` names the share)."""
        ...


def _identity(fingerprint: dict[str, Any]) -> str:
    """Nodes with the same identity are the same machine (`pooling.fingerprint_difference`)."""
    return repr([pooling.identity_value(fingerprint, f) for f in pooling.IDENTITY_FIELDS])


def _same_machines(
    nodes: list[Node], facts: dict[str, dict[str, Any]], events: SplitEvents
) -> list[Node]:
    """The largest group of nodes with one fingerprint; why each other one is left out."""
    groups: dict[str, list[Node]] = {}
    for node in nodes:
        groups.setdefault(_identity(facts[node.node_id]["fingerprint"]), []).append(node)
    chosen = max(groups.values(), key=len)
    first = facts[chosen[0].node_id]["fingerprint"]
    for node in nodes:
        if node not in chosen:
            differ = pooling.fingerprint_difference(first, facts[node.node_id]["fingerprint"])
            events.note(f"node {node.node_id[:8]} left out of the split: it differs in {differ}")
    return chosen


def deal(others: Sequence[str], baseline: str, nodes: int) -> list[list[str]]:
    """The candidates dealt round-robin to `nodes` shares, the baseline in each. With
    at least twice as many nodes as candidates, each candidate goes to several nodes
    (`nodes // len(others)`), whose estimates are then pooled; a share with nothing but
    the baseline is dropped."""
    copies = max(1, nodes // len(others))
    shares: list[list[str]] = [[baseline] for _ in range(nodes)]
    slot = 0
    for key in others:
        for _ in range(copies):
            shares[slot % nodes].append(key)
            slot += 1
    return [share for share in shares if len(share) > 1]


def run_split(
    workload: str,
    run_options: dict[str, Any],
    keys: list[str],
    baseline: str,
    cluster: str | None,
    cluster_tmp: Path | None,
    store_path: Path,
    events: SplitEvents,
    heartbeat_s: float = 2.0,
) -> dict[str, Any]:
    """Measure `keys` (the run's candidates by share key, `baseline` among them) spread
    over the cluster's identical nodes; the split's document."""
    check_run_options(run_options)
    spec = parse_cluster(cluster)
    if spec is None:
        raise UserError("--split needs --cluster (local:N, a Ray address, or RAY_ADDRESS)")
    ray = import_ray()
    from ray import exceptions as rex

    others = [k for k in keys if k != baseline]
    if not others:
        raise UserError(f"{workload}: nothing to split: the baseline is the only candidate")
    store_path = store_path.resolve()
    tmp = cluster_tmp or short_tmp(store_path.parent / "ray")
    with connect(spec, tmp) as session, Store(store_path) as store:
        events.connected(session)
        scratch = tmp / "nodes" if spec.simulated else None
        runners = {n.node_id: start_runner(n, scratch) for n in session.nodes}
        facts = dict(
            zip(runners, ray.get([r.facts.remote() for r in runners.values()]), strict=True)
        )
        nodes = _same_machines(session.nodes, facts, events)
        shares = deal(others, baseline, len(nodes))
        out: dict[Any, tuple[Node, list[str]]] = {}
        for node, share in zip(nodes, shares, strict=False):
            ref = runners[node.node_id].run.remote(workload, {**run_options, "share": share})
            out[ref] = (node, share)
            events.assigned(f"{workload}: {', '.join(share)}", node)
        results: list[dict[str, Any]] = []
        while out:
            ready, _ = ray.wait(list(out), num_returns=1, timeout=heartbeat_s)
            lost_now: list[tuple[Any, str]] = []
            if ready:
                ref = ready[0]
                try:
                    result = ray.get(ref)
                except rex.RayTaskError as exc:
                    node, share = out.pop(ref)
                    results.append(_node_entry(node, share, "failed", failure_words(exc)))
                    continue
                except rex.RayError as exc:
                    lost_now.append((ref, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"))
                else:
                    node, share = out.pop(ref)
                    run_id = import_node_run(store, node, result, split_share=share)
                    results.append({**_node_entry(node, share, "done", ""), "run_id": run_id})
                    events.note(f"node {node.node_id[:8]}: its share is done (run {run_id})")
            else:
                alive = session.alive()
                lost_now = [
                    (ref, "the node is no longer alive")
                    for ref, (node, _) in out.items()
                    if node.node_id not in alive
                ]
            for ref, why in lost_now:
                node, share = out.pop(ref)
                events.note(f"node {node.node_id[:8]} lost ({why}): its share fails")
                results.append(_node_entry(node, share, "failed", f"node lost: {why}"))
        margin = run_options.get("margin") or DEFAULT_MARGIN
        return split_document(workload, baseline, results, store, margin)


def _node_entry(node: Node, share: list[str], status: str, reason: str) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "node_type": node.node_type,
        "share": share,
        "status": status,
        "reason": reason,
        "run_id": None,
    }


def _per_round_time(
    rounds: list[tuple[int, list[int], int, int]], objective: str
) -> dict[int, float]:
    """Each round's figure as a time: its median call (latency) or its block's time per
    call (throughput), by round index."""
    if objective == "latency":
        return {r: float(np.median(lat)) for r, lat, _, _ in rounds if lat}
    return {r: block / len(lat) for r, lat, block, _ in rounds if lat}


def split_document(
    workload: str,
    baseline: str,
    nodes: list[dict[str, Any]],
    store: Store,
    margin: float,
) -> dict[str, Any]:
    """Per candidate and batch size, its ratio to the baseline on each node that measured
    it, pooled over those nodes; per batch size the leader; the nodes and their runs."""
    found: dict[tuple[str, int], list[dict[str, Any]]] = {}  # (key, bs) -> one per node
    failed: list[dict[str, Any]] = []
    for entry in nodes:
        if entry["run_id"] is None:
            failed += [
                {"key": key, "node_ids": [entry["node_id"]], "status": "failed",
                 "reason": entry["reason"]}
                for key in entry["share"][1:]
            ]  # fmt: skip
            continue
        run = store.run(entry["run_id"])
        doc = run["document"] or {}
        fingerprint = run["environment"].get("node", {}).get("fingerprint", {})
        objectives = {v["batch_size"]: v["objective"] for v in doc.get("verdicts", [])}
        by_key = {
            (share_key(Candidate.from_json(c)), int(c["batch_size"])): c
            for c in doc.get("candidates", [])
        }
        for (key, bs), c in by_key.items():
            if key == baseline:
                continue
            seen = {"node_id": entry["node_id"], "run_id": entry["run_id"], "candidate": c}
            base = by_key.get((baseline, bs))
            if c["status"] == "ok" and base is not None and base["status"] == "ok":
                objective = objectives.get(bs, "latency" if bs == 1 else "throughput")
                times_c = _per_round_time(store.rounds(entry["run_id"], c["id"]), objective)
                times_b = _per_round_time(store.rounds(entry["run_id"], base["id"]), objective)
                paired = sorted(set(times_c) & set(times_b))
                if paired:
                    seen["objective"] = objective
                    seen["rounds"] = pooling.NodeRounds(
                        entry["node_id"][:8],
                        fingerprint,
                        np.asarray([times_b[r] for r in paired]),
                        np.asarray([times_c[r] for r in paired]),
                    )
            found.setdefault((key, bs), []).append(seen)
    candidates: list[dict[str, Any]] = []
    measured: dict[int, list[dict[str, Any]]] = {}
    for (key, bs), seen_on in found.items():
        timed = [s for s in seen_on if "rounds" in s]
        first = seen_on[0]["candidate"]
        row: dict[str, Any] = {
            "id": first["id"],
            "key": key,
            "batch_size": bs,
            "node_ids": [s["node_id"] for s in seen_on],
            "run_ids": [s["run_id"] for s in seen_on],
            "status": "ok" if timed else first["status"],
            "reason": "" if timed else first["reason"],
            "ratio": None,
        }
        if timed:
            pooled = pooling.pool([s["rounds"] for s in timed], margin=margin)
            row["ratio"] = pooled.to_dict()
            row["objective"] = timed[0]["objective"]
            measured.setdefault(bs, []).append(row)
        candidates.append(row)
    verdicts = [_leader(bs, rows, baseline) for bs, rows in sorted(measured.items())]
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "split",
        "workload": workload,
        "baseline": baseline,
        "nodes": nodes,
        "candidates": candidates + failed,
        "verdicts": verdicts,
    }


def _leader(bs: int, rows: list[dict[str, Any]], baseline: str) -> dict[str, Any]:
    """The candidate with the lowest ratio to the baseline; those whose CI overlaps its
    own are not separated from it (they were measured against the baseline, on their
    own nodes, not against it). A node-dependent candidate does not lead."""
    rows = sorted(
        rows, key=lambda r: (r["ratio"]["decision"] == "node-dependent", r["ratio"]["ratio"])
    )
    lead = rows[0]
    lo_lead, hi_lead = lead["ratio"]["ci"]
    tied = [r["id"] for r in rows[1:] if r["ratio"]["ci"][0] <= hi_lead]
    decision = lead["ratio"]["decision"]
    words = (
        f"{lead['id']}: {lead['ratio']['ratio']:.3f} of the baseline's time "
        f"(CI {lo_lead:.3f}-{hi_lead:.3f}), {decision} than {baseline}"
        if decision in ("faster", "slower")
        else f"{lead['id']} leads, but is {decision} against {baseline}: {lead['ratio']['why']}"
    )
    if tied:
        words += f"; not separated from {', '.join(tied)}"
    return {
        "batch_size": bs,
        "objective": lead["objective"],
        "leader": lead["id"],
        "decision": decision,
        "ties": tied,
        "ranking": [r["id"] for r in rows],
        "headline": words,
    }
