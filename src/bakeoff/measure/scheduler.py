"""Measuring one batch-size group: load each candidate in its own worker, check its
quality, warm it up, then time all of them in randomized round-robin rounds.

Loads happen one at a time so cold-start figures are not inflated by a
neighbour; during rounds exactly one worker runs while the others sit blocked
on their sockets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.candidates import Candidate
from bakeoff.measure.process import WorkerFailed, WorkerProcess
from bakeoff.quality import evaluate


@dataclass(frozen=True)
class MeasureSettings:
    threads: int
    cpus: list[int] | None
    trial_timeout_s: float
    warmup_s: float
    warmup_calls: int
    slice_s: float  # target timed seconds per candidate per round
    settle_s: float  # untimed seconds (at least one call) before each timed block
    min_rounds: int
    max_rounds: int
    budget_s: float  # soft limit on the rounds of this group, checked after min_rounds
    seed: int


@dataclass(frozen=True)
class GroupContext:
    job_base: dict[str, Any]  # source, data_path, input_names
    run_dir: Path
    reference: np.ndarray
    labels: np.ndarray | None
    metric: str
    max_drop: float


Recorder = Callable[[Candidate, int, str, list[int], int | None], None]
Notify = Callable[[str, Candidate | None], None]


def _fail(c: Candidate, worker: WorkerProcess | None, reason: str) -> None:
    c.set_status("failed", reason)
    if worker is not None:
        worker.close()


def _load(c: Candidate, ctx: GroupContext, s: MeasureSettings) -> WorkerProcess | None:
    outputs_path = ctx.run_dir / "outputs" / f"{c.id}.npy"
    outputs_path.parent.mkdir(parents=True, exist_ok=True)
    job = {
        **ctx.job_base,
        "kind": "measure",
        "variant": {
            "runtime": c.variant.runtime,
            "precision": c.variant.precision,
            "method": c.variant.method,
        },
        "artifact": c.artifact,
        "batch_size": c.batch_size,
        "threads": s.threads,
        "cpus": s.cpus,
        "outputs_path": str(outputs_path),
    }
    worker = None
    try:
        worker = WorkerProcess(job, s.threads, ctx.run_dir / "logs" / f"{c.id}.log")
        ready = worker.reply(s.trial_timeout_s)
    except WorkerFailed as exc:
        _fail(c, worker, f"load or first call failed: {exc}")
        return None
    c.load_s, c.first_call_s = ready["load_s"], ready["first_call_s"]
    c.settings = ready["settings"]
    try:
        outputs = np.load(outputs_path, allow_pickle=False)
        c.quality = evaluate(ctx.metric, outputs, ctx.reference, ctx.labels, ctx.max_drop)
    except (ValueError, OSError) as exc:
        _fail(c, worker, f"quality check failed: {exc}")
        return None
    if not c.quality.passed:
        c.set_status("rejected", "quality gate: " + c.quality.describe())
        worker.close()
        return None
    return worker


def measure_group(
    candidates: list[Candidate],
    ctx: GroupContext,
    s: MeasureSettings,
    record: Recorder,
    notify: Notify,
) -> dict[str, float]:
    """Fill in cold start, quality, samples and peak memory; set each final status.

    Returns the wall time of each phase: loading with quality check, warm-up, rounds.
    """
    phases = {"load_and_quality": 0.0, "warmup": 0.0, "rounds": 0.0}
    t_phase = time.perf_counter()
    workers: dict[str, WorkerProcess] = {}
    calls: dict[str, int] = {}
    settle: dict[str, int] = {}
    try:
        for c in candidates:
            notify(f"loading {c.id}", c)
            w = _load(c, ctx, s)
            if w is not None:
                workers[c.id] = w
            if w is not None and c.quality is not None:
                notify(
                    f"loaded {c.id} in {c.load_s:.1f} s, first call {c.first_call_s:.2f} s; "
                    f"quality {c.quality.metric} {c.quality.value:.4f}",
                    c,
                )
            else:
                notify(f"{c.id}: {c.status}: {c.reason}", c)
        by_id = {c.id: c for c in candidates}
        phases["load_and_quality"] = time.perf_counter() - t_phase
        t_phase = time.perf_counter()
        for cid, w in list(workers.items()):
            c = by_id[cid]
            notify(f"warming up {cid}", c)
            try:
                reply = w.request(
                    {"cmd": "warmup", "seconds": s.warmup_s, "min_calls": s.warmup_calls},
                    s.trial_timeout_s,
                )
            except WorkerFailed as exc:
                _fail(c, None, f"warm-up failed: {exc}")
                del workers[cid]
                continue
            c.warmup_ns = reply["latency_ns"]
            record(c, -1, "warmup", c.warmup_ns, None)
            # A fixed call count per round, reused for every round (rule 4).
            typical = float(np.median(c.warmup_ns[len(c.warmup_ns) // 2 :]))
            calls[cid] = int(np.clip(round(s.slice_s * 1e9 / max(typical, 1.0)), 1, 100_000))
            settle[cid] = int(np.clip(round(s.settle_s * 1e9 / max(typical, 1.0)), 1, 1_000))
            c.settings = {**c.settings, "calls_per_round": calls[cid], "settle_calls": settle[cid]}
        rng = np.random.default_rng(s.seed)
        phases["warmup"] = time.perf_counter() - t_phase
        started = time.perf_counter()
        for r in range(s.max_rounds):
            order = list(workers)
            rng.shuffle(order)
            for cid in order:
                c = by_id[cid]
                try:
                    reply = workers[cid].request(
                        {"cmd": "measure", "calls": calls[cid], "settle": settle[cid]},
                        s.trial_timeout_s,
                    )
                except WorkerFailed as exc:
                    _fail(c, None, f"failed in round {r + 1}: {exc}")
                    workers.pop(cid).close()
                    continue
                c.rounds_ns.append(reply["latency_ns"])
                c.block_ns.append(reply["block_ns"])
                record(c, r, "measure", reply["latency_ns"], reply["block_ns"])
            notify(
                f"batch {candidates[0].batch_size if candidates else '?'}: round {r + 1} "
                f"done (at least {s.min_rounds}, at most {s.max_rounds}; "
                f"budget {s.budget_s:.0f} s)",
                None,
            )
            elapsed = time.perf_counter() - started
            per_round = elapsed / (r + 1)
            if r + 1 >= s.min_rounds and elapsed + per_round > s.budget_s:
                break
        for cid, w in workers.items():
            c = by_id[cid]
            try:
                c.peak_rss_mb = w.request({"cmd": "exit"}, s.trial_timeout_s)["peak_rss_mb"]
            except WorkerFailed as exc:
                _fail(c, None, f"failed while exiting: {exc}")
                continue
            c.set_status("ok")
        phases["rounds"] = time.perf_counter() - started
    finally:
        for w in workers.values():
            w.close()
    return phases
