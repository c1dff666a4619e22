"""A fake runtime with deterministic timings, for testing the trial engine, statistics,
verdicts and the store quickly. It is never offered for a real model.

Its runner carries a virtual clock (`clock_ns`) that the measuring loop uses in
place of the wall clock: each call advances it by a latency drawn from a seeded
generator, so the same workload gives the same samples on any machine.

Model options (``[model] kind = "fake"``, ``options = {...}``), each keyed by
precision: ``latency_ms`` (per call at batch 1), ``per_sample_ms`` (added per
sample in the batch), ``jitter`` (relative spread), ``error`` (relative error
added to outputs, to exercise the quality gate), ``wall_ms`` (real sleep per
call, so a test can interrupt a run in flight), ``model_mb`` (the size it
reports), ``seed``; ``not_needed`` (a reason, keyed by precision) makes that
precision's build say another variant made it unnecessary, as NNCF's
accuracy-aware INT8 does when plain INT8 passes, to test how a run leaves such a
variant out; ``build_wall_s`` (a real sleep in that precision's build) and
``load_error`` (a message its load fails with) let a test see what stops what
while builds run side by side; ``crash_at_batch`` kills the worker with SIGSEGV on
a call of that many samples (a kernel that breaks at one shape), and ``hang_at_batch``
makes such a call never return, to test that the crash or hang stays with the batch
size it happens at. A labelled
candidate's ``options`` override these for that candidate.
"""

from __future__ import annotations

import os
import resource
import signal
import time
import zlib
from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends.common import check_options

RUNTIME = "fake"
# Its latency follows each call's batch, so one worker serves every batch size.
ANY_BATCH_SIZE = True
PRECISIONS = ("fp32", "int8")


def availability() -> Availability:
    return Availability(True, "1")


def offers(precision: str, model_kind: str) -> list[Offer]:
    if model_kind != "fake":
        return [Offer(Variant(RUNTIME, precision), "the fake runtime only runs fake models")]
    if precision not in PRECISIONS:
        return [Offer(Variant(RUNTIME, precision), f"the fake runtime has no {precision}")]
    return [Offer(Variant(RUNTIME, precision))]


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    from bakeoff.transforms import StepNotNeeded

    why = ctx.source.options.get("not_needed", {}).get(variant.precision)
    if why and ctx.skip_unneeded:
        raise StepNotNeeded(f"not needed: {why}")
    time.sleep(_option(ctx.source.options, "build_wall_s", variant.precision, 0.0))
    return {}


def _option(options: dict[str, Any], key: str, precision: str, default: float) -> float:
    value = options.get(key, default)
    if isinstance(value, dict):
        value = value.get(precision, default)
    return float(value)


OPTIONS = {
    "threads",
    "latency_ms",
    "per_sample_ms",
    "jitter",
    "error",
    "wall_ms",
    "seed",
    "model_mb",
    "crash_at_batch",
    "hang_at_batch",
}


class FakeRunner:
    def __init__(self, variant: Variant, ctx: LoadContext) -> None:
        check_options(ctx.options, OPTIONS, RUNTIME)
        # A candidate's own options override the model's: two labelled candidates
        # of one fake variant can then differ in speed.
        opts = {**ctx.source.options, **ctx.options}
        p = variant.precision
        self.base_ns = 1e6 * _option(opts, "latency_ms", p, 1.0)
        self.per_sample_ns = 1e6 * _option(opts, "per_sample_ms", p, 0.0)
        self.jitter = _option(opts, "jitter", p, 0.02)
        self.error = _option(opts, "error", p, 0.0)
        # Real sleeping per call, so tests can interrupt a run that is in flight.
        self.wall_s = _option(opts, "wall_ms", p, 0.0) / 1000.0
        self.crash_at = int(_option(opts, "crash_at_batch", p, 0.0))
        self.hang_at = int(_option(opts, "hang_at_batch", p, 0.0))
        name = ctx.candidate_id or f"{variant.id}-b{ctx.batch_size}"
        seed = zlib.crc32(f"{name}/{opts.get('seed', 0)}".encode())
        self.rng = np.random.default_rng(seed)
        self.now = 0
        self.settings = {
            "virtual_clock": True,
            "latency_ms": self.base_ns / 1e6,
            "per_sample_ms": self.per_sample_ns / 1e6,
        }
        if "model_mb" in opts:
            self.model_bytes = int(_option(opts, "model_mb", p, 0.0) * 2**20)

    def clock_ns(self) -> int:
        return self.now

    def prepare(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(next(iter(batch.values())), dtype=np.float32)

    def run(self, prepared: np.ndarray) -> np.ndarray:
        if len(prepared) == self.crash_at:
            # As a native crash would end it; no core file is left behind.
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            os.kill(os.getpid(), signal.SIGSEGV)
        while len(prepared) == self.hang_at:  # until the orchestrator kills the worker
            time.sleep(60)
        factor = float(self.rng.lognormal(0.0, self.jitter)) if self.jitter > 0 else 1.0
        # The batch is the call's own (a worker goes on at another batch size).
        latency_ns = self.base_ns + self.per_sample_ns * len(prepared)
        self.now += max(1, int(latency_ns * factor))
        if self.wall_s:
            time.sleep(self.wall_s)
        out = prepared.reshape(len(prepared), -1)
        if self.error:
            # A deterministic distortion whose size tracks `error` for every metric.
            out = out + self.error * np.abs(out).mean() * np.sign(np.sin(np.arange(out.shape[1])))
        return out

    def to_numpy(self, output: np.ndarray) -> np.ndarray:
        return np.asarray(output, dtype=np.float32)


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> FakeRunner:
    error = ctx.source.options.get("load_error", {}).get(variant.precision)
    if error:
        raise RuntimeError(str(error))
    return FakeRunner(variant, ctx)
