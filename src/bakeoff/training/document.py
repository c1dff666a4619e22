"""The result document of a finished training run: what the store keeps, `--json`
writes and every report reads; the workload, one entry per stack, the verdicts. Its
keys only grow (SCHEMA_VERSION says when they change)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from bakeoff.training.candidate import TrainCandidate
from bakeoff.training.recipe import Recipe
from bakeoff.training.scaling import scaling_figures
from bakeoff.training.throughput import flops_efficiency, samples_per_s, tokens_per_s
from bakeoff.training.verdicts import memory_verdict, time_to_target_score, time_to_target_verdict

SCHEMA_VERSION = 1


def _candidate_document(
    c: TrainCandidate,
    recipe: Recipe,
    scaling: list[TrainCandidate],
    all_flops: dict[str, int | None],
    peaks: dict[str, Any],
) -> dict[str, Any]:
    sps = samples_per_s(c, recipe)
    flops = all_flops.get(c.stack, all_flops.get("*"))
    trained = c.trained_seeds()
    seeds = [
        {
            "seed": s["seed"],
            "time_to_target_s": s["time_to_target_s"],
            "final_metric": s["final_metric"],
            "diverged": s["diverged"],
            "steps": s["steps"],
            "evals": s["evals"],
            "losses": s["losses"],
        }
        for s in trained
    ]
    reached = [s["time_to_target_s"] for s in trained if s["time_to_target_s"] is not None]
    finals = [
        s["final_metric"] for s in trained if s["final_metric"] is not None and not s["diverged"]
    ]
    waits = [s["data_wait_share"] for s in trained if s.get("data_wait_share") is not None]
    compiles = [s["compile_s"] for s in trained]
    return {
        "id": c.id,
        "stack": c.stack,
        "status": c.status,
        "reason": c.reason,
        "processes": c.processes,
        "nodes": c.nodes,  # 0: this machine; else one rank on each of that many nodes
        "threads_per_process": c.settings.get("threads"),
        "samples_per_s": sps,
        "tokens_per_s": tokens_per_s(sps, recipe),
        "data_wait_share": float(np.mean(waits)) if waits else None,
        "peak_rss_mb": _peak_memory(c),
        "scaling": scaling_figures(c, sps, scaling, recipe),
        "flops_per_step": flops,
        "efficiency": flops_efficiency(c, sps, flops, peaks, recipe),
        "seeds": seeds,
        # Seeds whose worker failed; the score counts them as seeds that missed the target.
        "failed_seeds": c.failed_seeds(),
        "time_to_target_s": time_to_target_score(reached, len(c.seeds)) if c.seeds else None,
        "final_metric": {
            "mean": float(np.mean(finals)),
            "spread": float(np.ptp(finals)),
        }
        if finals
        else None,
        "checkpoint": None
        if c.checkpoint is None
        else {
            k: c.checkpoint[k]
            for k in ("save_s", "load_s", "size_mb", "reload_identical", "steps_compared", "format")
            if k in c.checkpoint
        },
        # where the stack compiles (its settings name the compiler)
        "compile_s": float(np.median(compiles))
        if compiles and "compile_backend" in c.settings
        else None,
        "trainable_parameters": c.settings.get("trainable_parameters"),
        "first_step_s": c.first_call_s,
        "settings": c.settings,
        "rounds": len(c.rounds_ns),
        "stopped": c.stopped,
        "validity": c.validity,
        "validity_reason": c.validity_reason,
    }


def _peak_memory(c: TrainCandidate) -> dict[str, Any] | None:
    """The peak resident memory of the largest rank and of all ranks together (one
    process: both the same); each rank's figure where there are several."""
    ranks = c.worker.get("peak_rss_mb_ranks") or (
        [c.peak_rss_mb] if c.peak_rss_mb is not None else []
    )
    if not ranks:
        return None
    out: dict[str, Any] = {"max_rank": max(ranks), "sum": sum(ranks)}
    if len(ranks) > 1:
        out["ranks"] = ranks
    return out


def document(
    run_id: str,
    recipe: Recipe,
    candidates: list[TrainCandidate],
    env: dict[str, Any],
    throughput: dict[str, Any],
    scaling: list[TrainCandidate],
    flops: dict[str, int | None],
    peaks: dict[str, Any],
) -> dict[str, Any]:
    docs = [_candidate_document(c, recipe, scaling, flops, peaks) for c in candidates]
    ref_final = next((d["final_metric"] for d in docs if d["stack"] == recipe.reference), None)
    for d in docs:
        if d["final_metric"] is not None and ref_final is not None:
            d["final_metric"]["reference"] = ref_final["mean"]
            d["final_metric"]["drop"] = ref_final["mean"] - d["final_metric"]["mean"]
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "kind": "train",
        "workload": {
            "name": recipe.name,
            "loss": recipe.loss,
            "optimizer": recipe.optimizer,
            "lr": recipe.lr,
            "lr_schedule": recipe.schedule,
            "warmup_steps": recipe.warmup_steps,
            "global_batch": recipe.batch_size,
            "max_steps": recipe.max_steps,
            "eval_every": recipe.eval_every,
            "target": {"metric": recipe.target_metric, "value": recipe.target},
            "train_rows": len(recipe.y_train),
            "validation_rows": len(recipe.y_val),
            "data": recipe.data,
            "tokens_per_row": recipe.tokens_per_row,
            "reference": recipe.reference,
            "tolerance": recipe.tolerance,
            "stack_lr": recipe.stack_lr,
            "lora": None if recipe.lora is None else dataclasses.asdict(recipe.lora),
        },
        "environment": env,
        "peaks": peaks,
        "candidates": docs,
        "verdicts": [
            throughput,
            time_to_target_verdict(docs, recipe.reference),
            memory_verdict(docs, recipe.reference),
        ],
    }
