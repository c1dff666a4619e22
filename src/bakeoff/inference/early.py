"""The first batch size's measuring workers, loaded while the last builds run.

On a 2-core machine the builds leave cores idle (a step waits for the export it
starts from; the last build runs alone), and a load that compiles (torch.compile:
tens of seconds at each shape) was the longest wait before the first round. A
variant that is built needs nothing else to load and pass its quality pass, so its
first measuring worker starts in a free build slot (`EarlyLoads.plan` says which). Nothing is timed
while builds run, so this moves no figure but the cold start, which is marked as
not loaded alone, as for any loads side by side; where cold starts must be
measured alone (`--worker-per-batch-size`, a cold-start limit) nothing loads early.

`Preloads` is the launcher the trial engine then starts its workers through: a
job that was loaded early is handed back with the reply its worker already gave
(its load, first call and quality outputs), any other goes to the inner launcher.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bakeoff.inference.messages import LoadJob
from bakeoff.trials.jobs import Command, Job, Measure, Timed
from bakeoff.trials.launcher import Launcher, Worker, WorkerFailed


def _key(job: LoadJob) -> str:
    return json.dumps(job.to_json(), sort_keys=True)


class _Loaded:
    """A worker that was loaded early, handed to the engine: its first `reply` is the
    one the worker gave then (or the failure), everything after goes to it."""

    def __init__(self, worker: Worker, ready: dict[str, Any] | WorkerFailed) -> None:
        self.worker = worker
        self._ready: dict[str, Any] | WorkerFailed | None = ready

    def reply(self, timeout: float) -> dict[str, Any]:
        ready, self._ready = self._ready, None
        if ready is None:
            return self.worker.reply(timeout)
        if isinstance(ready, WorkerFailed):
            raise ready
        return ready

    def request(self, cmd: Command, timeout: float) -> dict[str, Any]:
        return self.worker.request(cmd, timeout)

    def measure(self, cmd: Measure, timeout: float) -> Timed:
        return self.worker.measure(cmd, timeout)

    def close(self) -> None:
        self.worker.close()


class Preloads:
    """A launcher that hands back workers loaded early; `close` ends those nobody
    asked for (the run stopped, or the candidate left the run meanwhile)."""

    def __init__(self, inner: Launcher) -> None:
        self.inner = inner
        self._loaded: dict[str, _Loaded] = {}
        self._lock = threading.Lock()

    def load(
        self, job: LoadJob, name: str, timeout: float, started: Callable[[Worker], None]
    ) -> dict[str, Any] | WorkerFailed:
        """Start `job`'s worker and wait for its ready message (in a build slot's
        thread); `started` gets the worker as soon as it exists, so the builds'
        stop can end it. Returns the ready message, or why there is none."""
        try:
            # Beside the builds: a compile's kernels are compiled in this process
            # alone (`compile_threads`), not in one g++ per core.
            worker = self.inner.start(dataclasses.replace(job, compile_threads=1), name)
        except WorkerFailed as exc:
            return exc  # the engine starts it again in its turn, and reports what it says
        started(worker)
        try:
            ready: dict[str, Any] | WorkerFailed = worker.reply(timeout)
        except WorkerFailed as exc:  # the engine reports it as that load's failure
            ready = exc
        with self._lock:
            self._loaded[_key(job)] = _Loaded(worker, ready)
        return ready

    def start(self, job: Job, name: str) -> Worker:
        if isinstance(job, LoadJob):
            with self._lock:
                loaded = self._loaded.pop(_key(job), None)
            if loaded is not None:
                return loaded
        return self.inner.start(job, name)

    def run(self, job: Job, name: str, timeout: float) -> dict[str, Any]:
        return self.inner.run(job, name, timeout)

    def close(self) -> None:
        with self._lock:
            left = list(self._loaded.values())
            self._loaded.clear()
        for loaded in left:
            loaded.close()


@dataclass(frozen=True)
class EarlyLoad:
    """One measuring worker to load in a build slot: `name` is its candidate's id."""

    name: str
    job: LoadJob
    compiles: bool  # compiles at load: queued before the builds (after the reference)


@dataclass(frozen=True)
class EarlyLoads:
    """What the builds' slots load early: `plan(variant_id)` gives a built variant's
    first measuring workers, which `preloads` keeps until the engine asks."""

    plan: Callable[[str], list[EarlyLoad]]
    preloads: Preloads
    timeout_s: float
