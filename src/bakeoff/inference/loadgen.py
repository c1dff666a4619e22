"""MLPerf-style scenarios driven by MLPerf LoadGen (`mlcommons-loadgen`).

Server: queries of one sample arrive as a Poisson process at a target rate; a
run passes when the p99 latency (queueing included) stays within the bound and
the completed rate keeps up with the target. `find_peak_rate` searches for the
highest passing rate.

Offline: all samples are issued at once and the system under test works
through them as fast as it can, in batches, with one or more concurrent
streams; `offline_trial` reports the samples per second LoadGen measured.

LoadGen generates the queries and computes the figures: we do not write a load
generator of our own.

This module runs inside the measuring worker, next to the loaded variant.
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

INSTALL = "pip install mlcommons-loadgen==6.0.17"
# The completed rate may fall short of the target by this much and still pass:
# LoadGen's Poisson schedule makes short runs land a little under the target.
RATE_TOLERANCE = 0.9


def _summary_value(text: str, label: str) -> float | None:
    m = re.search(re.escape(label) + r"\s*:\s*([0-9.eE+-]+)", text)
    return float(m.group(1)) if m else None


def _log_settings(out_dir: Path) -> Any:
    import mlperf_loadgen as lg

    out_dir.mkdir(parents=True, exist_ok=True)
    log_output = lg.LogOutputSettings()
    log_output.outdir = str(out_dir)
    log_output.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = log_output
    log_settings.enable_trace = False
    return log_settings


def server_trial(
    run: Callable[[Any], Any],
    pool: list[Any],
    target_qps: float,
    bound_ms: float,
    duration_s: float,
    min_queries: int,
    out_dir: Path,
    seed: int,
) -> dict[str, Any]:
    """One LoadGen server run at `target_qps`; returns its p99, rate and pass/fail."""
    import mlperf_loadgen as lg

    work: queue.Queue[list[Any] | None] = queue.Queue()

    def serve() -> None:
        # One inference at a time, in arrival order: a single-instance server.
        while (batch := work.get()) is not None:
            for sample in batch:
                run(pool[sample.index % len(pool)])
                lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, 0, 0)])

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    sut = lg.ConstructSUT(lambda samples: work.put(list(samples)), lambda: None)
    qsl = lg.ConstructQSL(len(pool), len(pool), lambda _: None, lambda _: None)
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = float(target_qps)
    settings.server_target_latency_ns = int(bound_ms * 1e6)
    settings.server_target_latency_percentile = 0.99
    settings.min_duration_ms = int(duration_s * 1000)
    settings.min_query_count = int(min_queries)
    settings.schedule_rng_seed = seed
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, _log_settings(out_dir))
    finally:
        work.put(None)
        server.join()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    text = (out_dir / "mlperf_log_summary.txt").read_text()
    p99_ns = _summary_value(text, "99.00 percentile latency (ns)")
    completed = _summary_value(text, "Completed samples per second")
    p99_ms = p99_ns / 1e6 if p99_ns is not None else float("inf")
    achieved = completed if completed is not None else 0.0
    passed = p99_ms <= bound_ms and achieved >= RATE_TOLERANCE * target_qps
    return {
        "target_qps": round(float(target_qps), 3),
        "achieved_qps": round(achieved, 3),
        "p99_ms": round(p99_ms, 3),
        "passed": passed,
    }


def find_peak_rate(
    run: Callable[[Any], Any],
    pool: list[Any],
    single_stream_s: float,
    bound_ms: float,
    duration_s: float,
    min_queries: int,
    steps: int,
    out_dir: Path,
    seed: int,
) -> dict[str, Any]:
    """Bisect the arrival rate between 'surely passes' and 'surely fails'.

    A single-instance server cannot sustain more than 1/latency queries per
    second, so the search starts just under that and bisects downwards.
    """
    capacity = 1.0 / max(single_stream_s, 1e-6)
    lo, hi = 0.0, capacity * 1.05
    tries: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    rate = capacity * 0.8
    for i in range(steps):
        trial = server_trial(
            run, pool, rate, bound_ms, duration_s, min_queries, out_dir / f"try{i}", seed + i
        )
        tries.append(trial)
        if trial["passed"]:
            lo = rate
            if best is None or rate > best["target_qps"]:
                best = trial
        else:
            hi = rate
        rate = (lo + hi) / 2 if lo > 0 else rate / 2
    return {
        "scenario": "server",
        "bound_ms": bound_ms,
        "percentile": 99,
        "max_qps": best["target_qps"] if best else None,
        "p99_ms_at_max": best["p99_ms"] if best else None,
        "achieved_qps_at_max": best["achieved_qps"] if best else None,
        "tries": tries,
        "duration_s": duration_s,
        "generator": "mlperf_loadgen (Poisson arrivals)",
    }


def offline_trial(
    streams: list[Callable[[Any], Any]],
    pool: list[Any],
    batch_size: int,
    expected_sps: float,
    duration_s: float,
    out_dir: Path,
    seed: int,
) -> dict[str, Any]:
    """One LoadGen offline run: every sample issued at once, `len(streams)` workers.

    Each stream is a run function safe to call from its own thread. Samples are
    served in full batches of `batch_size` from the pool of real batches (a
    compiled model keeps its shape); a short last group still runs a full batch,
    which costs the same as it would in production.
    """
    import mlperf_loadgen as lg

    work: queue.Queue[list[Any] | None] = queue.Queue()
    failures: list[str] = []

    def serve(run: Callable[[Any], Any]) -> None:
        k = 0
        while (group := work.get()) is not None:
            try:
                run(pool[k % len(pool)])
            except Exception as exc:  # reported, and the rest still completes
                failures.append(f"{type(exc).__name__}: {exc}")
            k += 1
            lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in group])

    def issue(samples: list[Any]) -> None:
        for i in range(0, len(samples), batch_size):
            work.put(list(samples[i : i + batch_size]))

    threads = [threading.Thread(target=serve, args=(run,), daemon=True) for run in streams]
    for t in threads:
        t.start()
    total = len(pool) * batch_size
    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(total, total, lambda _: None, lambda _: None)
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Offline
    settings.mode = lg.TestMode.PerformanceOnly
    settings.offline_expected_qps = float(expected_sps)
    settings.min_duration_ms = int(duration_s * 1000)
    settings.min_query_count = 1
    settings.sample_index_rng_seed = seed
    settings.schedule_rng_seed = seed
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, _log_settings(out_dir))
    finally:
        for _ in threads:
            work.put(None)
        for t in threads:
            t.join()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    if failures:
        raise RuntimeError(f"{len(failures)} inference calls failed, first: {failures[0]}")
    text = (out_dir / "mlperf_log_summary.txt").read_text()
    sps = _summary_value(text, "Samples per second")
    return {
        "concurrency": len(streams),
        "samples_per_s": round(sps, 3) if sps is not None else None,
        "expected_sps": round(float(expected_sps), 3),
        "min_duration_s": duration_s,
    }
