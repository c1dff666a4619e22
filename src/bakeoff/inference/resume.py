"""Resuming a run: one process per run at a time, refusing when what the stored
rounds were measured with has changed, and putting back what was finished."""

from __future__ import annotations

from typing import Any

import numpy as np

from bakeoff import cache as variant_cache
from bakeoff import environment
from bakeoff.batching import layout_in
from bakeoff.candidates import Candidate
from bakeoff.errors import UserError
from bakeoff.paths import RunFolder, hold_run_lock
from bakeoff.store import Store
from bakeoff.workload import Workload

__all__ = ["check_resumable", "hold_run_lock", "restore"]


FINAL = ("ok", "rejected", "failed", "unavailable")


def check_resumable(
    record: dict[str, Any],
    workload: Workload,
    env: dict[str, Any],
    candidates: list[Candidate],
    folder: RunFolder,
    split: dict[str, np.ndarray],
) -> None:
    """Refuse to resume when what the stored rounds were measured with has changed:
    the finished run would mix two models, two workloads or two library versions."""
    start_over = "; put it back as it was to resume, or start a new run"
    run_id = record["run_id"]
    then = {d["id"] for d in record["candidates"]}
    now = {c.id for c in candidates}
    if then and then != now:  # none stored: killed before the candidates were saved
        added, gone = sorted(now - then), sorted(then - now)
        raise UserError(
            f"the workload now gives other candidates than when run {run_id} started"
            + (f" (new: {', '.join(added)})" if added else "")
            + (f" (no longer: {', '.join(gone)})" if gone else "")
            + start_over
        )
    stored = folder.data
    if stored.exists():
        with np.load(stored, allow_pickle=False) as then_data:
            same = set(then_data.files) == set(split) and all(
                np.array_equal(then_data[k], v) for k, v in split.items()
            )
            then_layout = layout_in(then_data)
        if then_layout != layout_in(split):
            raise UserError(
                f"the workload's data.batch_axes or data.constants changed since run {run_id} "
                f"started (then {dict(then_layout.batch_axes)} and "
                f"{list(then_layout.constants)}){start_over}"
            )
        if not same:
            raise UserError(f"the workload's data changed since run {run_id} started{start_over}")
    quality = record["settings"].get("quality")  # runs stored before this check lack it
    spec = workload.spec.quality
    if quality and (quality["metric"], quality["max_drop"]) != (spec.metric, spec.max_drop):
        raise UserError(
            f"the workload's quality gate changed since run {run_id} started (then "
            f"{quality['metric']} max_drop {quality['max_drop']:g}, now {spec.metric} "
            f"max_drop {spec.max_drop:g}){start_over}"
        )
    environment.check_same_packages(record, env)
    built_with = variant_cache.run_model_hash(folder.artifacts)
    if built_with is not None:
        model = variant_cache.model_hash(workload.source)
        if model["hash"] != built_with:
            raise UserError(
                f"the model changed since run {run_id} started (its files: "
                f"{', '.join(model['files']) or 'none'}, or its [model] settings){start_over}"
            )


def restore(candidates: list[Candidate], record: dict[str, Any], store: Store) -> None:
    """Put back what a killed run finished: final candidates whole, as their stored
    documents say, and the measured rounds of every candidate (from its trials)."""
    docs = {d["id"]: d for d in record["candidates"]}
    for i, c in enumerate(candidates):
        doc = docs.get(c.id)
        if doc is None:
            continue
        if doc["status"] in FINAL and c.status != "unavailable":
            c = candidates[i] = Candidate.from_json(doc)
        else:
            c.settings = dict(doc.get("settings") or {})
        rounds = store.rounds(record["run_id"], c.id)
        c.rounds_ns = [lat for _, lat, _, _ in rounds]
        c.block_ns = [block for _, _, block, _ in rounds]
        c.round_slots = [process for _, _, _, process in rounds]
