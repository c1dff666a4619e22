"""Resuming an interrupted generative run (`bakeoff run --resume RUN_ID`): refused when
what its stored rounds were measured with has changed, and what it finished put back.

What a resume keeps: each candidate the gate rejected or that failed (whole, as stored),
and every other candidate's timed rounds, each with its requests' TTFT and tokens (the
store writes a round's rows in one transaction, so a round is there whole or not at
all). What it does again: the reference's greedy text (deterministic), each remaining
candidate's build, load and gate (a fresh worker is always checked before it is timed),
then the rounds from where they stopped. After the rounds, the concurrency sweep starts
again whole (its stored rows are dropped first); the server scenario keeps its target
and every engine whose search had finished (`server_scenario.ServerSweep`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bakeoff import cache, environment
from bakeoff.errors import UserError
from bakeoff.generation.candidate import GenCandidate
from bakeoff.judge.generation import GenerationQuality
from bakeoff.store import Store
from bakeoff.workload import GenerationWorkload

__all__ = ["FINAL", "check_resumable", "model_digest", "restore"]

# Statuses a candidate has for good before the rounds end: put back, not run again.
FINAL = ("rejected", "failed")
START_OVER = "; put it back as it was to resume, or start a new run"


def model_digest(w: GenerationWorkload) -> str:
    """The model folder's identity by content, stored with the run."""
    return cache.folder_hash(w.folder)


def check_resumable(
    record: dict[str, Any],
    w: GenerationWorkload,
    env: dict[str, Any],
    inputs: dict[str, Any],
    folder: Path,
) -> None:
    """Refuse when the finished run would mix two models, two workloads or two library
    versions: the model folder, the tokenized prompts and text, the installed
    runtimes must be those the stored rounds were measured with."""
    run_id, settings = record["run_id"], record["settings"]
    if settings.get("model_digest") != model_digest(w):
        raise UserError(f"the model in {w.folder} changed since run {run_id} started{START_OVER}")
    stored = folder / "inputs.json"
    if stored.is_file() and json.loads(stored.read_text()) != inputs:
        raise UserError(
            f"the workload's prompts, held-out text or calibration text changed since run "
            f"{run_id} started (or its tokenizer did){START_OVER}"
        )
    environment.check_same_packages(record, env)


def restore(candidates: list[GenCandidate], record: dict[str, Any], store: Store) -> int:
    """Put back what the interrupted run finished (see the module's docstring); how
    many timed rounds were put back."""
    docs = {d["id"]: d for d in record["candidates"]}
    kept = 0
    for c in candidates:
        doc = docs.get(c.id)
        if doc is None or c.status == "unavailable":
            continue
        if doc["status"] in FINAL:
            _put_back_whole(c, doc)
            continue
        c.settings = dict(doc.get("settings") or {})  # calls per round, for its rounds
        c.server = dict(doc.get("server") or {})  # a finished search is kept
        kept += _put_back_rounds(c, record["run_id"], store)
    return kept


def _put_back_rounds(c: GenCandidate, run_id: str, store: Store) -> int:
    """The candidate's timed rounds from the store, each with its TTFT and tokens, up
    to the first one missing."""
    ttft = store.by_round(run_id, c.id, "measure:ttft_ns")
    tokens = store.by_round(run_id, c.id, "measure:tokens")
    for r, latency_ns, block_ns, slot in store.rounds(run_id, c.id):
        if r != len(c.rounds_ns) or r not in ttft or r not in tokens:
            break
        c.rounds_ns.append(latency_ns)
        c.block_ns.append(block_ns)
        c.round_slots.append(slot)
        c.ttft_ns.append(ttft[r])
        c.tokens.append(tokens[r])
    return len(c.rounds_ns)


def _put_back_whole(c: GenCandidate, doc: dict[str, Any]) -> None:
    """A candidate rejected or failed before the interruption, as its document says."""
    c.set_status(doc["status"], doc["reason"])
    c.settings = dict(doc.get("settings") or {})
    q = doc.get("quality")
    if q:
        c.quality = GenerationQuality(
            q["token_agreement"],
            q["common_prefix"],
            q["perplexity"],
            q["reference_perplexity"],
            q["compared_tokens"],
            q["min_agreement"],
            q["max_drop"],
        )
    cold = doc.get("cold_start_s") or {}
    c.load_s, c.first_call_s = cold.get("load"), cold.get("first_request")
    for key, stored in (("build_s", "build"), ("first_token_s", "first_token")):
        if cold.get(stored) is not None:
            c.worker[key] = cold[stored]
    c.peak_rss_mb = doc.get("peak_rss_mb")
    size = doc.get("model_size_mb")
    c.model_bytes = None if size is None else round(size * 2**20)
    c.stopped = doc.get("stopped") or ""
    # as the engine says of a candidate that is not ok (trials.validity)
    c.validity, c.validity_reason = "invalid", f"{c.status}: {c.reason}"
