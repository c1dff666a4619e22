"""Building the run's variants, each distinct one once in its own process, and the
FP32 reference's outputs that the quality gate compares every candidate with.

The reference is built first, alone; its outputs are then computed beside the
other builds (none of them needs those outputs), and a model or data that the FP32
reference cannot run stops every build at once: it costs seconds, not minutes of
exporting and quantizing.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakeoff import cache as variant_cache
from bakeoff import environment
from bakeoff.backends import STAND_IN_REFERENCES, Variant
from bakeoff.errors import BakeoffError
from bakeoff.inference.context import RunContext
from bakeoff.inference.early import EarlyLoad, EarlyLoads
from bakeoff.inference.messages import BuildJob
from bakeoff.inference.reference import (
    Reference,
    ReferenceFailed,
    Running,
    from_own_load,
    from_own_process,
    load_early,
)
from bakeoff.trials.launcher import Launcher, Worker, WorkerFailed


@dataclass
class Builds:
    """What building found: each variant's artifact (or why it failed) and what
    the variant cache saved."""

    built: dict[str, dict[str, Any] | str] = field(default_factory=dict)
    build_s: dict[str, float] = field(default_factory=dict)
    # Per variant built: wall and CPU seconds of its build process, and its threads.
    times: dict[str, dict[str, Any]] = field(default_factory=dict)
    side_by_side: int = 1  # builds that ran at once after the reference
    reused: int = 0  # build steps taken from the cache
    with_steps: int = 0  # variants that had steps to build
    saved_s: float = 0.0
    nothing_to_build: list[str] = field(default_factory=list)
    loaded_early: list[str] = field(default_factory=list)  # candidates loaded beside builds

    def artifacts(self) -> dict[str, dict[str, Any]]:
        return {vid: b for vid, b in self.built.items() if not isinstance(b, str)}

    def summary(self, artifacts_dir: Path) -> dict[str, Any]:
        """The document's `variant_cache` section."""
        return {
            "reused": self.reused,
            "variants": self.with_steps,
            "nothing_to_build": self.nothing_to_build,
            "saved_s": round(self.saved_s, 3),
            "enabled": (artifacts_dir / variant_cache.KEY_FILE).exists(),
            # Each build process's wall and CPU seconds (builds run side by side, so
            # their wall times overlap) and the threads it had.
            "builds": self.times,
            "side_by_side": self.side_by_side,
            # Measuring workers that loaded (and ran their quality pass) in the
            # builds' free slots; the build phase's wall time includes them.
            "loaded_beside_builds": self.loaded_early,
        }

    def describe(self) -> str:
        return (
            f"variant cache: {self.reused} of {self.with_steps} variants reused, "
            f"{self.saved_s:.1f} s of building saved"
            + (
                f" ({', '.join(self.nothing_to_build)}: nothing to build)"
                if self.nothing_to_build
                else ""
            )
        )


def _variants(ctx: RunContext, reference: Variant) -> dict[str, Variant]:
    variants: dict[str, Variant] = {reference.id: reference}
    for c in ctx.candidates:
        if c.status == "pending":
            variants.setdefault(c.variant.id, c.variant)
    return variants


@dataclass
class _Build:
    """One variant's build job and, once it ended, its reply or failure."""

    variant: Variant
    threads: int
    reply: dict[str, Any] | None = None
    failure: WorkerFailed | None = None


def _run(ctx: RunContext, launcher: Launcher, job: _Build, running: Running) -> None:
    """One build in its own process, to its reply (in a thread of its own when builds
    run side by side); `running` lets the orchestrator stop it."""
    vid = job.variant.id
    worker: Worker | None = None
    try:
        worker = launcher.start(
            BuildJob(base=ctx.job_base, variant=job.variant, build_threads=job.threads),
            f"build-{vid}",
        )
        running.add(vid, worker)
        job.reply = worker.reply(ctx.opts.build_timeout_s)
    except WorkerFailed as exc:  # it crashed, hung or said why (a start that failed too)
        job.failure = exc
    finally:
        running.remove(vid)
        if worker is not None:
            worker.close()


def _record(ctx: RunContext, builds: Builds, job: _Build, mark: int) -> None:
    """What a finished build gives its candidates: the artifact, or the failure."""
    vid = job.variant.id
    if job.failure is not None:
        if job.failure.not_needed:
            ctx.leave_out(vid, str(job.failure))
            return
        builds.built[vid] = f"build failed: {job.failure}"
        ctx.rep.stage(f"{vid}: {builds.built[vid]}")
    else:
        reply = job.reply or {}
        # Which of its steps were built, reused in this run or taken from the cache.
        events = variant_cache.read_events(ctx.folder.artifacts, mark, build=vid)
        use = variant_cache.summarize(events)
        builds.built[vid] = {**reply["artifact"], "cache_hit": use.from_cache}
        builds.build_s[vid] = reply["build_s"]
        builds.times[vid] = {
            "wall_s": round(reply["build_s"], 3),
            "cpu_s": None if reply.get("build_cpu_s") is None else round(reply["build_cpu_s"], 3),
            "threads": job.threads,
        }
        ctx.rep.stage(use.describe(vid, reply["build_s"]))
        builds.saved_s += use.saved_s
        if use.from_cache is None:
            builds.nothing_to_build.append(vid)
        else:
            builds.with_steps += 1
            builds.reused += use.from_cache
    for c in ctx.candidates:
        if c.variant.id == vid and c.status == "pending":
            b = builds.built[vid]
            if isinstance(b, str):
                c.set_status("failed", b)
            else:
                c.artifact, c.build_s = dict(b), builds.build_s[vid]
            ctx.save(c)
    ctx.show()


def _build(ctx: RunContext, launcher: Launcher, builds: Builds, variant: Variant) -> None:
    """One variant, alone."""
    ctx.rep.stage(f"building {variant.id}")
    mark = variant_cache.events_offset(ctx.folder.artifacts)
    job = _Build(variant, ctx.threads)
    _run(ctx, launcher, job, Running())
    _record(ctx, builds, job, mark)


def side_by_side(threads: int, variants: int) -> int:
    """How many builds run at once: up to the physical cores (a build keeps about one
    busy), never more than there are variants."""
    cores = environment.physical_cores()
    return max(1, min(cores, threads, variants))


class _Slots:
    """At most `n` calls at once, the lowest `priority` first, then in the order they
    came (concurrent.futures has no priorities). Calls start only in `dispatch`,
    which the orchestrator calls after it has handled what ended: an early load
    queued when a build ends is weighed against the builds still waiting, instead
    of the slot going to the next build before the load was queued."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="build")
        self._queue: list[tuple[int, int, Future[Any], Callable[..., Any], tuple[Any, ...]]] = []
        self._order = itertools.count()
        self._running: set[Future[Any]] = set()
        self._lock = threading.Lock()

    def submit(self, priority: int, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        handle: Future[Any] = Future()
        heapq.heappush(self._queue, (priority, next(self._order), handle, fn, args))
        return handle

    def dispatch(self) -> None:
        while self._queue:
            with self._lock:
                if len(self._running) >= self._n:
                    return
            _, _, handle, fn, args = heapq.heappop(self._queue)
            if not handle.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            with self._lock:
                self._running.add(handle)
            self._pool.submit(fn, *args).add_done_callback(functools.partial(self._ended, handle))

    def _ended(self, handle: Future[Any], inner: Future[Any]) -> None:
        with self._lock:  # the slot is free before anyone waiting on `handle` wakes
            self._running.discard(handle)
        exc = inner.exception()
        if exc is not None:
            handle.set_exception(exc)
        else:
            handle.set_result(inner.result())

    def __enter__(self) -> _Slots:
        return self

    def __exit__(self, *exc: object) -> None:
        for _, _, handle, _, _ in self._queue:
            handle.cancel()
        self._pool.shutdown(wait=True)


# Priorities in the builds' slots: the reference's outputs first (a reference that
# fails stops everything), then early loads that compile (the longest single
# tasks), then builds, then the other early loads.
_FIRST, _COMPILING_LOAD, _BUILD, _LOAD = 0, 1, 2, 3


def _submit_reference(
    slots: _Slots,
    ctx: RunContext,
    launcher: Launcher,
    builds: Builds,
    reference: Variant,
    early: EarlyLoads | None,
    own: list[EarlyLoad],
    threads: int,
    running: Running,
) -> Future[Any]:
    """The reference's job, first in line: its own candidate at the first batch size,
    loaded early (`own`), whose quality pass gives the reference's outputs in the
    process that is then timed (a torch worker fewer, about 10 s of CPU on MiniLM);
    or, without one, a process of its own."""
    if own:
        assert early is not None
        ctx.rep.stage(f"loading {own[0].name} beside the builds; its outputs are the reference's")
        builds.loaded_early.append(own[0].name)
        return slots.submit(_FIRST, from_own_load, ctx, reference, early, own[0], running)
    artifact = builds.built[reference.id]
    if isinstance(artifact, str):
        raise BakeoffError(f"the FP32 reference {reference.id} could not be built: {artifact}")
    return slots.submit(
        _FIRST, from_own_process, ctx, launcher, reference, artifact, threads, running
    )


def _builds_and_reference(
    ctx: RunContext,
    launcher: Launcher,
    builds: Builds,
    reference: Variant,
    variants: list[Variant],
    done: int,
    early: EarlyLoads | None,
) -> Reference:
    """The reference's outputs and the independent variants' builds side by side,
    each process with its share of the threads; nothing is timed meanwhile
    (measuring starts when all are done). The reference's job goes first; builds
    are recorded in the order they end. With `early`, each built variant's first
    measuring workers load in the slots the builds leave free. When the reference
    fails, every build is stopped and the run ends with the reference's error."""
    n = side_by_side(ctx.threads, len(variants) + 1)
    builds.side_by_side = n
    threads = max(1, ctx.threads // n)
    jobs = [_Build(v, threads) for v in variants]
    running = Running()
    mark = variant_cache.events_offset(ctx.folder.artifacts)
    total = done + len(jobs)
    ctx.rep.stage(f"computing reference outputs ({reference.id})")
    if jobs:
        at_a_time = f"{n} at a time, {threads} thread(s) each" if n > 1 else "one at a time"
        ctx.rep.stage(f"building {', '.join(v.id for v in variants)} ({at_a_time})")
    result: Reference | None = None
    loads: set[Future[Any]] = set()
    # the reference's own candidate at the first batch size first (_submit_reference)
    reference_loads = [] if early is None or n < 2 else early.plan(reference.id)
    own, others = reference_loads[:1], reference_loads[1:]

    def queue_loads(slots: _Slots, planned: list[EarlyLoad]) -> set[Future[Any]]:
        """A built variant's first measuring workers, loading in free slots."""
        assert early is not None or not planned
        new = set()
        for load in planned:
            ctx.rep.stage(f"loading {load.name} beside the builds (nothing is timed meanwhile)")
            priority = _COMPILING_LOAD if load.compiles else _LOAD
            builds.loaded_early.append(load.name)
            new.add(slots.submit(priority, load_early, early, load, running))
        loads.update(new)
        return new

    with _Slots(n) as slots:
        ref_future = _submit_reference(
            slots, ctx, launcher, builds, reference, early, own, threads, running
        )
        futures = {slots.submit(_BUILD, _run, ctx, launcher, job, running): job for job in jobs}
        # The reference's variant was built alone, before these.
        pending: set[Future[Any]] = {ref_future, *futures, *queue_loads(slots, others)}
        stand_in = _stand_in(ctx, reference, variants)
        failed: ReferenceFailed | None = None
        try:
            while pending:
                slots.dispatch()
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    if future is ref_future:
                        result, failed = _reference_done(
                            ctx, future, reference, stand_in, beside=bool(jobs)
                        )
                    elif future in futures:
                        done += 1
                        ctx.rep.progress("building", done, total)
                        job = futures[future]
                        _record(ctx, builds, job, mark)
                        built = not isinstance(builds.built.get(job.variant.id, ""), str)
                        if early is not None and n > 1 and built:
                            pending |= queue_loads(slots, early.plan(job.variant.id))
        except BaseException:  # the reference failed, or Ctrl-C: stop every build now
            for f in [ref_future, *futures, *loads]:
                f.cancel()
            running.stop()
            raise
    if failed is not None and stand_in is not None:
        return _from_stand_in(ctx, launcher, builds, stand_in, failed, running)
    assert result is not None
    return result


def _reference_done(
    ctx: RunContext,
    future: Future[Any],
    reference: Variant,
    stand_in: Variant | None,
    beside: bool,
) -> tuple[Reference | None, ReferenceFailed | None]:
    """The reference's outputs, or (where a stand-in can give them once the builds are
    done) why the reference gave none; its failure otherwise ends the run here."""
    if stand_in is not None and (failed := _failure(future)) is not None:
        # the builds go on: the stand-in's is one of them
        ctx.rep.stage(
            f"the FP32 reference ({failed.which}) failed: {failed.reasons}; the builds go "
            f"on, and {stand_in.id}, which reads the same file, will give its outputs"
        )
        return None, failed
    result: Reference = future.result()  # the reference's failure (or a stop) raises here
    ctx.rep.stage(
        f"reference outputs ({reference.id}) in {result.seconds:.1f} s"
        + (" (beside the builds)" if beside else "")
    )
    return result, None


def _stand_in(ctx: RunContext, reference: Variant, variants: list[Variant]) -> Variant | None:
    """The FP32 variant that gives the reference's outputs if the reference's own
    runtime cannot load the model (`backends.STAND_IN_REFERENCES`: OpenVINO for a
    SavedModel an older TensorFlow wrote), where the run builds it; else None."""
    other = STAND_IN_REFERENCES.get(ctx.workload.source.kind)
    if other is None or other.runtime == reference.runtime:
        return None
    return next((v for v in variants if v == Variant(other.runtime, "fp32")), None)


def _failure(future: Future[Any]) -> ReferenceFailed | None:
    """The reference's failure, if its job ended in one (anything else raises)."""
    try:
        future.result()
    except ReferenceFailed as exc:
        return exc
    return None


def _from_stand_in(
    ctx: RunContext,
    launcher: Launcher,
    builds: Builds,
    stand_in: Variant,
    failed: ReferenceFailed,
    running: Running,
) -> Reference:
    """The reference's outputs from the stand-in's build, in a process of its own, once
    every build is done; the document says which reference it used and why."""
    artifact = builds.built.get(stand_in.id)
    if not isinstance(artifact, dict):
        raise BakeoffError(f"{failed}; the stand-in {stand_in.id} could not be built either")
    ctx.rep.stage(f"computing reference outputs ({stand_in.id}, standing in)")
    found = from_own_process(ctx, launcher, stand_in, artifact, ctx.threads, running)
    why = f"the FP32 reference ({failed.which}) failed: {failed.reasons}"
    return dataclasses.replace(found, stands_in_for=why)


def build_all(
    ctx: RunContext, launcher: Launcher, reference: Variant, early: EarlyLoads | None = None
) -> tuple[Builds, Reference, float]:
    """Every distinct variant of the pending candidates, the reference first and its
    outputs beside the other builds, and the `early` loads in the slots they leave.
    Returns the builds, the reference and the phase's wall seconds (the reference's
    outputs and the early loads ran within them)."""
    t_build = time.perf_counter()
    # The run's base key for the variant cache: model files, calibration data and
    # library versions hashed once here; each build step adds its own name.
    ctx.rep.stage(
        variant_cache.prepare_run(
            ctx.folder.artifacts,
            ctx.workload.source,
            Path(ctx.job_base.data_path),
            list(ctx.job_base.input_names),
            ctx.env.get("packages", {}),
        )
    )
    variants = _variants(ctx, reference)
    builds = Builds()
    ctx.rep.progress("building", 0, len(variants))
    _build(ctx, launcher, builds, reference)
    ref = _builds_and_reference(
        ctx, launcher, builds, reference, list(variants.values())[1:], 1, early
    )
    ctx.rep.progress("building", len(variants), len(variants))
    build_s = time.perf_counter() - t_build
    variant_cache.record_variants(ctx.folder.artifacts, builds.artifacts())
    ctx.rep.stage(builds.describe())
    return builds, ref, build_s
