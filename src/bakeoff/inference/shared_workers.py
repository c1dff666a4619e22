"""One measuring worker per build of a variant, kept from one batch-size group to the
next instead of a fresh process per (variant, batch size).

`SharedWorkers` is a `Launcher` around another one. It is told, before the first
group, at which batch sizes each build will be timed (`plan`). The first measuring
worker of a build with several loads the variant once, makes its first (cold) call
at its group's batch size, runs the quality pass once at the largest batch size,
and is then timed at its group's. When the group ends, the engine's `Exit` becomes
a `Peak` (the memory figure of that batch size) and the process is kept; the next
group's `start` for the same build gets it back, moved on with `Rebatch`. Its first
call at the new shape is that batch size's (a runtime that compiles per shape
compiles in it; at the largest, that came in the quality pass), marked as no cold
start.

Everything else passes through unchanged: a further process for a close call
while the build's worker is in use, jobs of runtimes that fix the batch shape
when they load (`backends.any_batch_size`), builds and cold starts. A shared worker
whose quality pass could not run at the largest batch size is not kept; one that
died before it was ready (out of memory at the larger batch, say) is replaced by a
worker of the candidate's own, and the build is not shared again.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from bakeoff.inference.messages import LoadJob, Rebatch
from bakeoff.trials.jobs import Command, Exit, Job, Measure, Peak, Timed
from bakeoff.trials.launcher import Launcher, Worker, WorkerFailed


def build_key(job: LoadJob) -> str:
    """What makes two measuring jobs one candidate's build at two batch sizes:
    everything they load with except the batch size and where outputs go. The
    candidate's name without its batch size stays in: two hand-written candidates
    of one build (an A/A pair) get a worker each, alike."""
    doc = job.to_json()
    load = dict(doc["load"])
    load["candidate_id"] = job.load.candidate_id.removesuffix(f"-b{job.load.batch_size}")
    for name in ("batch_size", "quality_batch_size"):
        load.pop(name, None)
    doc["load"] = load
    doc.pop("outputs_path", None)
    doc.pop("reuse_compiles", None)
    return json.dumps(doc, sort_keys=True)


def first_job(job: LoadJob, sizes: Sequence[int]) -> LoadJob:
    """The job a build's shared worker is started with, for its first candidate
    `job`, when the build is timed at `sizes`: the quality pass moves to the
    largest of them. A build timed at one batch size is started with `job`."""
    if len(set(sizes)) < 2 or job.load.batch_size not in sizes:
        return job
    return dataclasses.replace(
        job, load=dataclasses.replace(job.load, quality_batch_size=max(sizes))
    )


class SharedWorkers:
    """A launcher that keeps each build's measuring worker across batch sizes."""

    def __init__(self, inner: Launcher, plan: Mapping[str, Sequence[int]]) -> None:
        # build_key -> the batch sizes it will be timed at, ascending; a build timed
        # at one batch size only is never kept.
        self.inner = inner
        self.plan = {key: sorted(set(sizes)) for key, sizes in plan.items() if len(set(sizes)) > 1}
        self.kept: dict[str, _Held] = {}  # free between groups
        self.leased: dict[str, _Held] = {}  # measuring a group now
        self._lock = threading.Lock()  # the engine may load a group side by side

    def run(self, job: Job, name: str, timeout: float) -> dict[str, Any]:
        return self.inner.run(job, name, timeout)

    def start(self, job: Job, name: str) -> Worker:
        if not isinstance(job, LoadJob):
            return self.inner.start(job, name)
        key = build_key(job)
        sizes = self.plan.get(key)
        with self._lock:
            if sizes is None or key in self.leased or job.load.batch_size not in sizes:
                held = None  # as without sharing: a process of its own
            else:
                held = self.kept.pop(key, None)
                if held is None:
                    held = _Held(None, first_job(job, sizes), sizes)
                self.leased[key] = held
        if held is None:
            return self.inner.start(job, name)
        if held.worker is None:
            try:
                held.worker = self.inner.start(held.first, name)
            except BaseException:
                self.release(key, keep=False)
                raise
        return SharedWorker(self, key, held, job, name)

    def unshare(self, key: str) -> None:
        """The build's shared worker failed: it ends, and the build's later batch sizes
        get workers of their own."""
        self.plan.pop(key, None)
        self.release(key, keep=False)

    def release(self, key: str, keep: bool) -> None:
        with self._lock:
            held = self.leased.pop(key)
            if keep:
                self.kept[key] = held
                return
        if held.worker is not None:
            held.worker.close()

    def close(self) -> None:
        """End every kept worker (the run is over, or stopped)."""
        with self._lock:
            ending = [*self.kept.values(), *self.leased.values()]
            self.kept.clear()
            self.leased.clear()
        for held in ending:
            if held.worker is not None:
                held.worker.close()


@dataclasses.dataclass
class _Held:
    """A build's kept worker: the process, the job it was started with, what its ready
    message said, and the batch size it is at."""

    worker: Worker | None  # None until started
    first: LoadJob
    sizes: list[int]
    ready: dict[str, Any] | None = None
    batch_size: int = 0

    @property
    def shareable(self) -> bool:
        """Whether its quality pass ran at the largest batch size (it may not have:
        `worker.not_at`), so later batch sizes can be judged on it."""
        info = (self.ready or {}).get("worker", {})
        return bool(info.get("quality_batch_size") == max(self.sizes))


class SharedWorker:
    """The engine's handle on a kept worker for one candidate (one batch size)."""

    def __init__(
        self, owner: SharedWorkers, key: str, held: _Held, job: LoadJob, name: str
    ) -> None:
        assert held.worker is not None
        self.owner, self.key, self.held, self.job, self.name = owner, key, held, job, name
        self.worker: Worker = held.worker
        self.released = False
        self.alone = False  # the shared worker failed; this one has a process of its own

    def reply(self, timeout: float) -> dict[str, Any]:
        """The ready message: the load's own for the worker's first batch size, or,
        for a later one, the load's figures with the first call at the new shape."""
        held, bs = self.held, self.job.load.batch_size
        if held.ready is None:  # a fresh process: its load, its cold first call
            try:
                ready = self.worker.reply(timeout)
            except WorkerFailed as exc:
                if bs == max(held.sizes):
                    raise
                # It may have died at the larger batch of the quality pass (out of
                # memory, a kernel that crashes there): this batch size alone, as
                # without sharing, so one batch size's failure is not another's.
                return self._on_its_own(exc, timeout)
            held.ready, held.batch_size = ready, bs
            info = dict(ready.get("worker", {}))
            info.update(batch_sizes=held.sizes, first_call="cold")
            return {**ready, "worker": info}
        moved = self.worker.request(
            Rebatch(batch_size=bs, outputs_path=self.job.outputs_path), timeout
        )
        earlier = held.batch_size
        held.batch_size = bs
        info = dict(held.ready.get("worker", {}))
        info.update(batch_sizes=held.sizes, first_call=f"after batch size {earlier}")
        # This process's first call at this shape came in the quality pass, where a
        # runtime that compiles per shape compiled for it: that one is reported.
        first_call_s = moved["first_call_s"]
        if bs == info.get("quality_batch_size"):
            first_call_s = info.get("first_call_at_quality_batch_size_s", first_call_s)
        return {
            **held.ready,
            "first_call_s": first_call_s,
            "settings": moved["settings"],
            "worker": info,
        }

    def _on_its_own(self, failed: WorkerFailed, timeout: float) -> dict[str, Any]:
        self.released = self.alone = True
        self.owner.unshare(self.key)
        self.worker = self.owner.inner.start(self.job, self.name)
        ready = self.worker.reply(timeout)
        why = f"the worker for batch sizes {self.held.sizes} failed ({failed})"
        return {**ready, "worker": {**ready.get("worker", {}), "alone_because": why[:400]}}

    def request(self, cmd: Command, timeout: float) -> dict[str, Any]:
        if isinstance(cmd, Exit) and self._keep():
            reply = self.worker.request(Peak(), timeout)
            self.released = True
            self.owner.release(self.key, keep=True)
            return reply
        return self.worker.request(cmd, timeout)

    def measure(self, cmd: Measure, timeout: float) -> Timed:
        return self.worker.measure(cmd, timeout)

    def close(self) -> None:
        """After a kept worker's release, nothing; otherwise the process ends (an exit,
        or a failure the engine is dropping it for)."""
        if self.alone:
            self.worker.close()
        elif not self.released:
            self.released = True
            self.owner.release(self.key, keep=False)

    def _keep(self) -> bool:
        """Whether a later group times this build at a larger batch size."""
        if self.alone or not self.held.shareable:
            return False
        return any(size > self.job.load.batch_size for size in self.held.sizes)
