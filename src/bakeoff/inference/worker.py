"""The inference worker process: builds a variant, or loads one and times it on
command (the messages of `inference.messages`).

Run as ``python -m bakeoff.inference.worker FD`` by the launcher, through the loop
every worker runs (`trials.worker.serve`).
"""

from __future__ import annotations

import builtins
import importlib
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bakeoff.backends import BuildContext, LoadContext, Runner, any_batch_size, get_backend
from bakeoff.batching import read_split
from bakeoff.cache.events import BUILD_VARIABLE
from bakeoff.inference.messages import (
    JOBS,
    BuildJob,
    ColdStartJob,
    JobBase,
    LoadJob,
    LoadSpec,
    Offline,
    Rebatch,
    ReferenceJob,
    Server,
)
from bakeoff.inference.quality_outputs import alt_outputs_path, batches, save_quality_outputs
from bakeoff.judge.outputs import copy_named
from bakeoff.sizes import model_bytes
from bakeoff.trials.jobs import Exit, Job, JobError, Measure, Peak, Timed, Warmup
from bakeoff.trials.memory import PeakMemory
from bakeoff.trials.worker import Handlers, answer_until_exit, send, serve


def timed_calls(
    run: Callable[[Any], Any], pool: list[Any], n: int, clock: Callable[[], int]
) -> tuple[list[int], int]:
    """Time `n` calls cycling through `pool`; return per-call ns and the block's ns.

    The loop body is kept minimal: its overhead is measured by
    benchmarks/harness_overhead.py and must stay far below the calls it times.
    """
    latencies = [0] * n
    k = len(pool)
    block_start = clock()
    for i in range(n):
        x = pool[i % k]
        t0 = clock()
        run(x)
        latencies[i] = clock() - t0
    return latencies, clock() - block_start


class ImportClock:
    """Wall time spent importing while it is on (outermost imports only).

    Cold start is import + load + compile + first call (docs/method.md rule 3); the runtimes
    import their libraries inside `load`, so the import share is taken apart
    here, for every backend alike. Both `import` statements and
    `importlib.import_module` calls count (transformers loads a model's module
    with the latter); a module that bound `import_module` to a name of its own
    before the clock started still bypasses it.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._depth = 0
        self._original = builtins.__import__
        self._original_import_module = importlib.import_module

    def _timed(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return original(*args, **kwargs)
        self._depth += 1
        t0 = time.perf_counter() if self._depth == 1 else 0.0
        try:
            return original(*args, **kwargs)
        finally:
            if self._depth == 1:
                self.seconds += time.perf_counter() - t0
            self._depth -= 1

    def _import(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._original, *args, **kwargs)

    def _import_module(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._original_import_module, *args, **kwargs)

    def __enter__(self) -> ImportClock:
        builtins.__import__ = self._import
        importlib.import_module = self._import_module
        return self

    def __exit__(self, *exc: object) -> None:
        builtins.__import__ = self._original
        importlib.import_module = self._original_import_module


def _load_runner(base: JobBase, load: LoadSpec) -> Runner:
    ctx = LoadContext(
        source=base.source,
        threads=load.threads,
        batch_size=load.batch_size,
        input_names=base.input_names,
        options=load.options,
        candidate_id=load.candidate_id,
        streams=load.streams,
        data_path=base.data_path,
    )
    backend = get_backend(load.variant.runtime)
    with ImportClock() as imports:
        runner = backend.load(load.variant, load.artifact, ctx)
    runner.settings = {**runner.settings, "import_s": round(imports.seconds, 6)}
    return runner


def do_build(job: BuildJob) -> dict[str, Any]:
    base = job.base
    ctx = BuildContext(
        source=base.source,
        artifacts_dir=base.artifacts_dir,
        data_path=base.data_path,
        input_names=base.input_names,
        threads=job.threads,
        gate=base.gate,
        skip_unneeded=base.skip_unneeded,
    )
    # Builds of a run may run side by side: each step event says whose it is.
    os.environ[BUILD_VARIABLE] = job.variant.id
    t0, cpu0 = time.perf_counter(), _cpu_s()
    artifact = get_backend(job.variant.runtime).build(job.variant, ctx)
    return {
        "ok": True,
        "artifact": artifact,
        "build_s": time.perf_counter() - t0,
        "build_cpu_s": _cpu_s() - cpu0,
    }


def _cpu_s() -> float:
    """CPU seconds of this process (all its threads) and of the children it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def do_reference(job: ReferenceJob) -> dict[str, Any]:
    runner = _load_runner(job.base, job.load)
    save_quality_outputs(runner, job)
    return {"ok": True, "settings": runner.settings}


def do_cold_start(job: ColdStartJob, started: float) -> dict[str, Any]:
    """Only what a fresh process pays before its first answer: load, then one call."""
    runner = _load_runner(job.base, job.load)
    load_s = time.perf_counter() - started
    clock: Callable[[], int] = getattr(runner, "clock_ns", time.perf_counter_ns)
    pool, layout = read_split(job.base.data_path, "pool", job.base.input_names)
    batch = runner.prepare(batches(pool, layout, job.load.batch_size, 1)[0])
    t0 = clock()
    runner.run(batch)
    return {
        "ok": True,
        "load_s": load_s,
        "first_call_s": (clock() - t0) / 1e9,
        "import_s": runner.settings["import_s"],
    }


def _timing_pool(runner: Runner, base: JobBase, batch_size: int) -> list[Any]:
    """Distinct real batches, cycled: docs/method.md rule 5 (never one tensor repeated)."""
    arrays, layout = read_split(base.data_path, "pool", base.input_names)
    count = min(16, max(4, -(-layout.count(arrays) // batch_size)))
    return [runner.prepare(b) for b in batches(arrays, layout, batch_size, count)]


class Serving:
    """A loaded variant answering commands at one batch size at a time."""

    def __init__(self, runner: Runner, job: LoadJob) -> None:
        self.runner, self.job = runner, job
        self.clock: Callable[[], int] = getattr(runner, "clock_ns", time.perf_counter_ns)
        self.memory = PeakMemory()
        self.batch_size = job.load.batch_size
        self.pool = _timing_pool(runner, job.base, self.batch_size)
        # Calls at this batch size since it was set, made just before the warm-up,
        # that the warm-up counts: the first call after a Rebatch.
        self.warm_calls = 0
        # Calls the quality pass made, by batch size: at a batch size this process
        # has run them, its lazy set-up for the shape is done, and the warm-up
        # counts them too (its seconds still run in full, right before the rounds).
        self.quality_calls: dict[int, int] = {}

    def first_call(self) -> float:
        t0 = self.clock()
        self.runner.run(self.pool[0])
        return (self.clock() - t0) / 1e9

    def rebatch(self, cmd: Rebatch) -> dict[str, Any]:
        runtime = self.job.load.variant.runtime
        if not any_batch_size(runtime):
            raise JobError(f"{runtime} fixes the batch shape when it loads: start a new worker")
        self.memory.restart()
        self.batch_size = cmd.batch_size
        self.pool = _timing_pool(self.runner, self.job.base, cmd.batch_size)
        first_call_s = self.first_call()
        self.warm_calls = 1 + self.quality_calls.get(cmd.batch_size, 0)
        # The outputs this process gave on the quality hold-out, where the gate reads
        # them for the candidate at the new batch size.
        copy_named(self.job.outputs_path, cmd.outputs_path)
        if alt_outputs_path(self.job.outputs_path).exists():
            copy_named(alt_outputs_path(self.job.outputs_path), alt_outputs_path(cmd.outputs_path))
        return {"first_call_s": first_call_s, "settings": self.runner.settings}

    def warm_up(self, cmd: Warmup) -> dict[str, Any]:
        """At least `seconds` and `min_calls`: caches, allocators and thread pools
        reach steady state before any sample is kept. A first call at a new batch
        size, made just before, is one of the `min_calls` (docs/method.md rule 4)."""
        lat: list[int] = []
        done, self.warm_calls = self.warm_calls, 0
        deadline = self.clock() + int(cmd.seconds * 1e9)
        # At least one call of its own: the engine fixes the calls per round from them.
        while not lat or len(lat) + done < cmd.min_calls or self.clock() < deadline:
            lat += timed_calls(self.runner.run, self.pool, 1, self.clock)[0]
            if len(lat) >= cmd.max_calls:
                break
        return {"latency_ns": lat}

    def measure(self, cmd: Measure) -> dict[str, Any]:
        self.warm_calls = 0
        # Untimed settling calls first: right after another worker ran, the first
        # call pays for that worker's spinning threads and our cold caches, a cost
        # of the interleaving, not of this runtime.
        for i in range(cmd.settle):
            self.runner.run(self.pool[i % len(self.pool)])
        lat, block_ns = timed_calls(self.runner.run, self.pool, cmd.calls, self.clock)
        return Timed(lat, block_ns).to_json()

    def server(self, cmd: Server) -> dict[str, Any]:
        from bakeoff.inference.loadgen import find_peak_rate

        found = find_peak_rate(
            self.runner.run,
            self.pool,
            single_stream_s=cmd.single_stream_s,
            bound_ms=cmd.bound_ms,
            duration_s=cmd.duration_s,
            min_queries=cmd.min_queries,
            steps=cmd.steps,
            out_dir=Path(cmd.out_dir),
            seed=cmd.seed,
        )
        return {"server": found}

    def offline(self, cmd: Offline) -> dict[str, Any]:
        from bakeoff.inference.loadgen import offline_trial

        new_stream = getattr(self.runner, "new_stream", None)
        streams = [new_stream() if new_stream else self.runner.run for _ in range(cmd.concurrency)]
        found = offline_trial(
            streams,
            self.pool,
            self.batch_size,
            expected_sps=cmd.expected_sps,
            duration_s=cmd.duration_s,
            out_dir=Path(cmd.out_dir),
            seed=cmd.seed,
        )
        return {"offline": found}

    def handlers(self) -> Handlers:
        """What each command this worker answers measures, as the reply's fields."""
        return {
            Warmup: self.warm_up,
            Measure: self.measure,
            Server: self.server,
            Offline: self.offline,
            Rebatch: self.rebatch,
            Peak: self.peak,
            Exit: self.peak,
        }

    def peak(self, _cmd: Peak | Exit) -> dict[str, Any]:
        return {"peak_rss_mb": self.memory.mb()}


def serve_measure(conn: Connection, job: LoadJob, started: float) -> None:
    runner = _load_runner(job.base, job.load)
    load_s = time.perf_counter() - started
    serving = Serving(runner, job)
    first_call_s = serving.first_call()
    serving.memory.loaded()
    quality = save_quality_outputs(runner, job)
    at = int(quality["quality_batch_size"])
    quality_samples, layout = read_split(job.base.data_path, "quality", job.base.input_names)
    serving.quality_calls[at] = -(-layout.count(quality_samples) // at)
    serving.memory.restart()
    send(
        conn,
        {
            "ok": True,
            "event": "ready",
            "load_s": load_s,
            "first_call_s": first_call_s,
            "settings": runner.settings,
            "model_bytes": model_bytes(runner, job.load.artifact),
            "pid": os.getpid(),
            "worker": {**quality, "peak_memory": serving.memory.scope()},
        },
    )
    answer_until_exit(conn, serving.handlers())


def run(conn: Connection, job: Job, started: float) -> None:
    match job:
        case BuildJob():
            send(conn, do_build(job))
        case ReferenceJob():
            send(conn, do_reference(job))
        case LoadJob():
            serve_measure(conn, job, started)
        case ColdStartJob():
            send(conn, do_cold_start(job, started))
        case _:
            raise JobError(f"an inference worker does not run {job.kind!r} jobs")


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), JOBS, run))
