"""The FP32 reference's outputs on the quality hold-out, which the quality gate
compares every candidate with, and where they came from.

They come from the reference's own candidate's measuring worker, loaded beside the
builds (its quality pass is the reference's job, done in the process that is then
timed), or from a reference process of its own. Either runs the held-out set in
chunks of one batch size: the largest of the run's where one worker serves them all
(`inference.shared_workers`). A model that crashes, hangs or runs out of memory at that size
(a kernel that breaks at one shape) would then take every candidate's quality
check, and the run, with it, though it runs at the run's other batch sizes. So the
held-out set runs again in smaller chunks, each try in a fresh process, before the
run gives up; the candidates at the batch size that failed fail on their own when
they are measured. The document says which chunk size the outputs came from, and
why (`Reference.record`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.backends import Variant
from bakeoff.errors import BakeoffError
from bakeoff.inference.context import RunContext
from bakeoff.inference.early import EarlyLoad, EarlyLoads
from bakeoff.inference.messages import LoadSpec, ReferenceJob
from bakeoff.inference.quality_outputs import alt_outputs_path
from bakeoff.judge.outputs import Named, load_named
from bakeoff.trials.launcher import Launcher, Worker, WorkerFailed

# The name of a reference process of its own (its worker's log is logs/reference.log).
OWN_PROCESS = "reference"


@dataclass(frozen=True)
class Reference:
    """The FP32 reference's outputs on the quality hold-out (and at the second
    shape, when axes are variable), how long computing them took, and where they
    came from: the worker (its candidate's id, or `OWN_PROCESS`), the chunk size it
    ran the held-out set in, and the chunk sizes that failed before, with why."""

    variant: Variant
    # Every output, named (judge.outputs); the first is what exports compare with.
    outputs: Named
    outputs_alt: Named | None
    seconds: float
    worker: str
    chunk_size: int
    failed: tuple[tuple[int, str], ...] = ()
    # Why the kind's own reference gave no outputs, where another runtime's FP32 of
    # the same file stood in (`inference.variants`); "" when it is the own one.
    stands_in_for: str = ""

    def record(self) -> dict[str, Any]:
        """The document's account of where the reference's outputs came from."""
        return {
            "worker": self.worker,
            "chunk_size": self.chunk_size,
            "fell_back_from": [{"chunk_size": size, "reason": why} for size, why in self.failed],
            **({"stands_in_for": self.stands_in_for} if self.stands_in_for else {}),
            # A model with several outputs: their names, each judged (judge.outputs).
            **({"outputs": [n for n, _ in self.outputs]} if len(self.outputs) > 1 else {}),
        }


class Running:
    """The workers of builds (and of the reference's outputs) in flight, so the
    orchestrator can stop them all (Ctrl-C, or a reference that failed); one that
    starts after that is stopped at once."""

    def __init__(self) -> None:
        self._workers: dict[str, Worker] = {}
        self._stopped = False
        self._lock = threading.Lock()

    def add(self, key: str, worker: Worker) -> None:
        with self._lock:
            self._workers[key] = worker
            stopped = self._stopped
        if stopped:
            worker.close()

    def remove(self, key: str) -> None:
        with self._lock:
            self._workers.pop(key, None)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            workers = list(self._workers.values())
        for worker in workers:
            worker.close()


def load_early(
    early: EarlyLoads, load: EarlyLoad, running: Running
) -> dict[str, Any] | WorkerFailed:
    """One measuring worker loaded into `early.preloads`, stoppable with the builds."""
    key = f"load {load.name}"  # no variant id has a space in it
    try:
        return early.preloads.load(
            load.job, load.name, early.timeout_s, lambda w: running.add(key, w)
        )
    finally:
        running.remove(key)


def smaller_chunks(failed_at: int, batch_sizes: Sequence[int]) -> list[int]:
    """The chunk sizes to try, in order, after the held-out set failed in chunks of
    `failed_at`: the run's smaller batch sizes, the largest first, then 1.

    The run's own batch sizes are shapes it runs the model at anyway, so a try adds
    no shape of its own; the largest first, because a model that fails only at large
    shapes (memory, a kernel that breaks at one shape) most likely runs at the next
    one down, and larger chunks make the pass quicker; 1 last, the shape any model
    that runs at all must take. Each try costs a process start, and a hang a trial
    timeout, so no size is tried that the run does not measure, but 1."""
    smaller = {size for size in batch_sizes if size < failed_at}
    if failed_at > 1:
        smaller.add(1)
    return sorted(smaller, reverse=True)


def from_own_load(
    ctx: RunContext, variant: Variant, early: EarlyLoads, load: EarlyLoad, running: Running
) -> Reference:
    """The reference's outputs from its own candidate's measuring worker, loaded
    early: the quality outputs it saved are the reference's. Where that worker
    failed, smaller chunks in fresh processes (`smaller_chunks`)."""
    t_ref = time.perf_counter()
    ready = load_early(early, load, running)
    spec = load.job.load
    at = spec.quality_batch_size or spec.batch_size
    if isinstance(ready, WorkerFailed):
        attempt = _tries(ctx, early.preloads, variant, spec.artifact, spec.threads, running)
        own = _alone_early(early, load, running)
        return _fall_back(
            ctx,
            variant,
            f"as {load.name}",
            (at, str(ready)),
            t_ref,
            lambda chunk: own() if chunk == spec.batch_size else attempt(chunk),
        )
    info = ready.get("worker", {})
    # Its quality pass fell back to its own batch size in the same process where the
    # larger one raised (`worker.not_at`): that is a fallback too.
    failed = ((at, str(info["not_at"])),) if "not_at" in info else ()
    chunk = int(info.get("quality_batch_size", at))
    return _read(variant, Path(load.job.outputs_path), t_ref, load.name, chunk, failed)


def from_own_process(
    ctx: RunContext,
    launcher: Launcher,
    variant: Variant,
    artifact: dict[str, Any],
    threads: int,
    running: Running,
) -> Reference:
    """The reference's outputs from a reference process of its own, in chunks of the
    run's first batch size (then smaller ones, where that fails)."""
    t_ref = time.perf_counter()
    first_bs = ctx.batch_sizes[0]
    attempt = _tries(ctx, launcher, variant, artifact, threads, running)
    got = attempt(first_bs)
    if isinstance(got, WorkerFailed):
        return _fall_back(ctx, variant, f"batch {first_bs}", (first_bs, str(got)), t_ref, attempt)
    path, worker = got
    return _read(variant, path, t_ref, worker, first_bs, ())


class ReferenceFailed(BakeoffError):
    """The FP32 reference gave no outputs at any chunk size: the run's error, unless
    another runtime's FP32 of the same file stands in (`inference.variants`)."""

    def __init__(self, which: str, reasons: str) -> None:
        super().__init__(
            f"the FP32 reference ({which}) failed, so no variant can be quality-checked: {reasons}"
        )
        self.which, self.reasons = which, reasons


# One try at a chunk size: where the outputs were saved and by which worker, or why
# it failed.
_Try = Callable[[int], tuple[Path, str] | WorkerFailed]


def _tries(
    ctx: RunContext,
    launcher: Launcher,
    variant: Variant,
    artifact: dict[str, Any],
    threads: int,
    running: Running,
) -> _Try:
    """A try at one chunk size in a reference process of its own."""

    def attempt(chunk: int) -> tuple[Path, str] | WorkerFailed:
        path = ctx.folder.reference
        job = ReferenceJob(
            base=ctx.job_base,
            load=LoadSpec(variant=variant, artifact=artifact, batch_size=chunk, threads=threads),
            outputs_path=str(path),
        )
        worker: Worker | None = None
        try:
            worker = launcher.start(job, OWN_PROCESS)
            running.add(OWN_PROCESS, worker)
            worker.reply(ctx.opts.trial_timeout_s)
        except WorkerFailed as exc:
            return exc
        finally:
            running.remove(OWN_PROCESS)
            if worker is not None:
                worker.close()
        return path, OWN_PROCESS

    return attempt


def _alone_early(
    early: EarlyLoads, load: EarlyLoad, running: Running
) -> Callable[[], tuple[Path, str] | WorkerFailed]:
    """A try at the early-loaded candidate's own batch size: its worker again, with
    its quality pass at that batch size. That is the process the trial engine
    starts for the candidate when its shared worker failed
    (`SharedWorker._on_its_own`); loaded early, it is handed over as it is, so no
    process starts for nothing."""

    def attempt() -> tuple[Path, str] | WorkerFailed:
        alone = dataclasses.replace(
            load.job, load=dataclasses.replace(load.job.load, quality_batch_size=None)
        )
        ready = load_early(early, EarlyLoad(load.name, alone, load.compiles), running)
        if isinstance(ready, WorkerFailed):
            return ready
        return Path(alone.outputs_path), load.name

    return attempt


def _fall_back(
    ctx: RunContext,
    variant: Variant,
    where: str,
    first: tuple[int, str],
    t_ref: float,
    attempt: _Try,
) -> Reference:
    """Smaller chunks, each in a fresh process, until one gives the outputs; the
    run's error, with every chunk size's reason, when none does."""
    failed = [first]
    for chunk in smaller_chunks(first[0], ctx.batch_sizes):
        size, why = failed[-1]
        ctx.rep.stage(
            f"the reference's outputs ({variant.id}) failed in chunks of {size} ({why}): "
            f"again in chunks of {chunk}, in a fresh process"
        )
        got = attempt(chunk)
        if isinstance(got, WorkerFailed):
            failed.append((chunk, str(got)))
            continue
        path, worker = got
        ctx.rep.stage(
            f"the reference's outputs ({variant.id}) came in chunks of {chunk}; "
            f"candidates at batch size {first[0]} are measured on their own"
        )
        return _read(variant, path, t_ref, worker, chunk, tuple(failed))
    reasons = (
        failed[0][1]
        if len(failed) == 1
        else "; ".join(f"in chunks of {size}: {why}" for size, why in failed)
    )
    raise ReferenceFailed(f"{variant.id}, {where}", reasons)


def _read(
    variant: Variant,
    path: Path,
    t_ref: float,
    worker: str,
    chunk: int,
    failed: tuple[tuple[int, str], ...],
) -> Reference:
    """The outputs a worker saved at `path` (and at the second shape), as the reference."""
    alt_path = alt_outputs_path(path)
    return Reference(
        variant,
        load_named(path),
        load_named(alt_path) if alt_path.exists() else None,
        time.perf_counter() - t_ref,
        worker,
        chunk,
        failed,
    )
