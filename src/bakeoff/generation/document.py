"""A generative run's document: each candidate's figures (time to first token, time
per output token, tokens/s one request at a time and at each concurrency) and the two
verdicts, judged by the same `decide` as every bake-off's."""

from __future__ import annotations

from typing import Any

import numpy as np

from bakeoff.generation.candidate import REFERENCE, ConcurrentRound, GenCandidate
from bakeoff.judge import stats
from bakeoff.judge.verdict import Measured, brief, decide
from bakeoff.trials.settings import TrialSettings


def spread(values: list[int]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {
        "min": float(a.min()),
        "p50": float(np.median(a)),
        "mean": round(float(a.mean()), 2),
        "max": float(a.max()),
    }


def _percentiles_ms(matrix: np.ndarray, slots: np.ndarray | None) -> dict[str, Any]:
    pct = stats.latency_percentiles(matrix, slots)
    return {
        **{k: round(pct[k].value, 6) for k in ("p50", "p90", "p99", "mean")},
        "ci95": {k: [round(pct[k].lo, 6), round(pct[k].hi, 6)] for k in ("p50", "p90", "p99")},
        "n": int(matrix.size),
        "unsupported": stats.unsupported_percentiles(int(matrix.size)),
    }


def candidate_document(c: GenCandidate) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": c.id,
        "runtime": c.runtime,
        "precision": c.precision,
        "method": c.method or None,
        "status": c.status,
        "reason": c.reason,
        "validity": c.validity,
        "validity_reason": c.validity_reason,
        "stopped": c.stopped,
        "ttft_ms": None,
        "tpot_ms": None,
        "tokens_per_s": None,
        "peak_rss_mb": None if c.peak_rss_mb is None else round(c.peak_rss_mb, 1),
        "model_size_mb": None if c.model_bytes is None else round(c.model_bytes / 2**20, 3),
        "quality": None if c.quality is None else c.quality.to_json(),
        "cold_start_s": {
            "build": c.worker.get("build_s"),
            "load": c.load_s,
            "first_token": c.worker.get("first_token_s"),
            "first_request": c.first_call_s,
        },
        "settings": c.settings,
    }
    if c.rounds_ns and len(c.ttft_ns) == len(c.rounds_ns):
        slots = np.asarray(c.round_slots, dtype=np.int64) if c.round_slots else None
        doc["tpot_ms"] = _percentiles_ms(c.samples(), slots)
        doc["ttft_ms"] = _percentiles_ms(np.asarray(c.ttft_ns, dtype=np.int64), slots)
        tokens = np.asarray(c.tokens, dtype=np.int64).sum(axis=1)
        rate = stats.throughput(tokens, np.asarray(c.block_ns), 1, slots)
        doc["tokens_per_s"] = {**_rate(rate), "at": "batch 1, one request at a time"}
        doc["concurrency"] = {"1": _level_document(_one_at_a_time(c))}
    for level, rounds in sorted(c.concurrency.items()):
        doc.setdefault("concurrency", {})[str(level)] = _level_document(rounds)
    if c.concurrency_lost:
        doc["concurrency_lost"] = c.concurrency_lost
    if c.server:
        doc["server"] = c.server
    return doc


def _rate(rate: stats.Interval) -> dict[str, Any]:
    return {"value": round(rate.value, 3), "ci95": [round(rate.lo, 3), round(rate.hi, 3)]}


def _one_at_a_time(c: GenCandidate) -> list[ConcurrentRound]:
    """The TPOT rounds as the sweep's rounds at concurrency 1 (one request at a time)."""
    return [
        ConcurrentRound(ttft, tokens, block)
        for ttft, tokens, block in zip(c.ttft_ns, c.tokens, c.block_ns, strict=True)
    ]


def _tokens_per_s(rounds: list[ConcurrentRound]) -> stats.Interval:
    tokens = np.asarray([sum(r.tokens) for r in rounds], dtype=np.int64)
    return stats.throughput(tokens, np.asarray([r.block_ns for r in rounds]), 1)


def _level_document(rounds: list[ConcurrentRound]) -> dict[str, Any]:
    """One concurrency's figures: tokens/s over the rounds' wall time (bootstrap CI
    over rounds) and each request's time to first token, queueing included."""
    rate = _tokens_per_s(rounds)
    requests = min(len(r.ttft_ns) for r in rounds)
    ttft = np.asarray([r.ttft_ns[:requests] for r in rounds], dtype=np.int64)
    return {
        "tokens_per_s": _rate(rate),
        "ttft_ms": _percentiles_ms(ttft, None),
        "rounds": len(rounds),
        "requests": int(ttft.size),
    }


def concurrency_verdict(
    candidates: list[GenCandidate], rounds_done: dict[int, int], s: TrialSettings, asked: bool
) -> dict[str, Any]:
    """Tokens/s with several requests at once, at each concurrency of the sweep by the
    same judge as every verdict (the ratio of tokens over wall time, rounds paired);
    the headline is the highest concurrency's. A candidate whose worker was lost
    during a concurrency's rounds is left out of it, with why."""
    if not rounds_done:
        return {
            "objective": "tokens_per_s",
            "winner": None,
            "reason": "no candidate passed the gate to be swept"
            if asked
            else "the concurrency sweep was not asked for (--concurrency 0)",
            "per_concurrency": {},
        }
    per: dict[str, dict[str, Any]] = {}
    baseline = GenCandidate(*REFERENCE).id
    for level, rounds in sorted(rounds_done.items()):
        measured = []
        for c in candidates:
            got = c.concurrency.get(level, [])
            if c.status != "ok" or len(got) < rounds:
                continue
            requests = min(len(r.ttft_ns) for r in got)
            measured.append(
                Measured(
                    c.id,
                    np.asarray([r.ttft_ns[:requests] for r in got], dtype=np.int64),
                    np.asarray([r.block_ns for r in got], dtype=np.int64),
                    1,
                    units=np.asarray([sum(r.tokens) for r in got], dtype=np.int64),
                )
            )
        measured_ids = {m.id for m in measured}
        not_ok = {
            c.id: f"{c.status}: {c.reason}" if c.status != "ok" else c.concurrency_lost
            for c in candidates
            if c.id not in measured_ids
        }
        v = decide(
            level,
            "throughput",
            measured,
            baseline,
            not_ok,
            margin=s.margin,
            min_rounds=rounds,
        ).to_dict()
        per[str(level)] = brief(
            v,
            f"tokens/s with {level} requests submitted together",
            f"{level} requests at once: " + " ".join([v["headline"], *v["points"]]),
        )
    top = max(rounds_done)
    return {**per[str(top)], "at_concurrency": top, "per_concurrency": per}


def tpot_verdict(candidates: list[GenCandidate], s: TrialSettings) -> dict[str, Any]:
    measured = [
        Measured(c.id, c.samples(), np.asarray(c.block_ns), 1, np.asarray(c.round_slots))
        for c in candidates
        if c.status == "ok" and c.rounds_ns
    ]
    not_ok = {c.id: f"{c.status}: {c.reason}" for c in candidates if c.status != "ok"}
    v = decide(
        1,
        "latency",
        measured,
        GenCandidate(*REFERENCE).id,
        not_ok,
        margin=s.margin,
        min_rounds=s.min_rounds,
    ).to_dict()
    return brief(v, "tpot_ms p50 at batch 1", v["reason"])
