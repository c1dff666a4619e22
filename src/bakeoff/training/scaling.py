"""Scaling: a multi-process stack against itself in 1 process (with the run's threads,
and with 1 thread), a stack across nodes against itself on one node. The references
are timed in the same rounds as the stacks; their figures go in the document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bakeoff.training.candidate import TrainCandidate
from bakeoff.training.messages import TrainJob
from bakeoff.training.options import NodeCluster
from bakeoff.training.recipe import Recipe
from bakeoff.training.specs import candidate_spec, stack_spec
from bakeoff.training.throughput import samples_per_s
from bakeoff.trials.jobs import Job


def scaling_entrants(
    pending: list[TrainCandidate],
    recipe: Recipe,
    data: Path,
    init: Path,
    threads: int,
    jobs: dict[str, Job],
    cluster: NodeCluster | None = None,
) -> list[TrainCandidate]:
    """For each multi-process stack, the same stack in 1 process with the run's
    threads and with 1 thread, timed in the same rounds (so drift hits them alike);
    for one across nodes, the same stack in 1 rank on one node."""
    out = []
    for c in pending:
        if c.nodes:
            label = f"{c.stack}@1-node"
            ref = TrainCandidate(
                c.stack, recipe.batch_size, label=label, scaling_of=c.stack, nodes=1
            )
            jobs[label] = TrainJob(train=candidate_spec(recipe, ref, data, init, 0, 1, cluster))
            out.append(ref)
            continue
        if c.processes == 1:
            continue
        for label, n in ((f"{c.stack}@1-process", threads), (f"{c.stack}@1-thread", 1)):
            ref = TrainCandidate(c.stack, recipe.batch_size, label=label, scaling_of=c.stack)
            jobs[label] = TrainJob(train=stack_spec(recipe, c.stack, data, init, 0, n, processes=1))
            out.append(ref)
    return out


def scaling_figures(
    c: TrainCandidate, sps: dict[str, Any] | None, scaling: list[TrainCandidate], recipe: Recipe
) -> dict[str, Any] | None:
    """A multi-process stack against itself in 1 process: with the same total threads,
    and against `processes` times its 1-thread throughput; and the share of its step
    time the gradients' all-reduce was in flight."""
    if c.processes == 1:
        return None
    refs = {r.label.rpartition("@")[2]: r for r in scaling if r.scaling_of == c.stack}
    value = sps["value"] if sps else None

    def rate(r: TrainCandidate | None) -> float | None:
        found = samples_per_s(r, recipe) if r is not None and r.status == "ok" else None
        return found["value"] if found else None

    if c.nodes:
        # Across nodes: against the same stack in 1 rank on one node, N times over.
        one_node = rate(refs.get("1-node"))
        why = [f"{r.id}: {r.status}: {r.reason}" for r in refs.values() if r.status != "ok"]
        return {
            "nodes": c.nodes,
            "efficiency_vs_one_node": value / (c.nodes * one_node) if value and one_node else None,
            "communication_share": c.worker.get("communication_share"),
            "one_node_samples_per_s": one_node,
            "reason": "; ".join(why),
        }

    one_process, one_thread = rate(refs.get("1-process")), rate(refs.get("1-thread"))
    why = [
        f"{r.id}: {r.status}: {r.reason}" for r in refs.values() if r.status != "ok" and r.reason
    ]
    if c.worker.get("communication_share") is None:
        why.append(
            "communication not timed: DDP's is, through its communication hook, and this "
            "stack has none"
        )
    return {
        "efficiency_vs_one_process": value / one_process if value and one_process else None,
        "efficiency_vs_one_thread": value / (c.processes * one_thread)
        if value and one_thread
        else None,
        "communication_share": c.worker.get("communication_share"),
        "one_process_samples_per_s": one_process,
        "one_thread_samples_per_s": one_thread,
        "reason": "; ".join(why),
    }
