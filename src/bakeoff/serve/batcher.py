"""Dynamic batching: requests merged in arrival order up to a number of *rows*.

One dispatcher task forms batches; each batch goes to an idle model instance and
runs in a thread (the runtimes release the GIL), so with N instances N batches run
at once. A batch closes when the next request would take it past `max_rows`, when
the oldest request in it has waited `max_delay_s`, or when the next request cannot
be stacked with it (other non-batch shapes, other constant inputs). When a batch
fails, its requests run again one by one, so only a request the runtime cannot
take gets the error (a neighbour's bad input never fails a good request).

It also closes before the delay when waiting is unlikely to fill it: when it
holds at least as many requests as the last batch did and no other request is in
the server. Clients that each wait for their answer before sending again (one
client calling in turn, or 8 clients under a 32-row limit) then never wait the
delay for company that cannot come until they are answered; when more requests
are in the server than in the batch, or fewer came than last time, it waits.

A lone request on a one-instance server (nothing else in the server, nothing
queued, the instance idle) runs at once on the event loop's own thread, in the
request's own handler (`run_now`), when the last lone request's time, scaled to
this one's rows, is within `INLINE_MAX_S`. Queueing it, handing it to the
instance's thread and back, and waking the handler again cost about 0.3 ms of
its latency on a 2-core VM, most of it in code run cache-cold after the
inference; and there is nobody to serve meanwhile: a request arriving during the
run would wait for the one instance anyway. A longer run goes to the thread as
usual, so that health checks, metrics and a drain are never held up for long.
Its metrics are recorded after the answer has gone.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from bakeoff.serve.model import Runner

Outputs = dict[str, np.ndarray]
Results = tuple[list[Outputs | Exception], list[tuple[int, float]]]

# The longest a lone request is expected to run for it to run on the event loop.
INLINE_MAX_S = 0.05


class QueueFull(Exception):
    """The bounded queue is full: the client should retry later (503)."""


class BatchFailed(Exception):
    """This request did not run: the runtime failed on it (run alone once its batch
    had failed), or the server stopped first. A 500 with the message."""


def _failure(exc: Exception) -> BatchFailed:
    return BatchFailed(f"the runtime failed on this request: {type(exc).__name__}: {exc}")


@dataclass
class _Pending:
    inputs: dict[str, np.ndarray]
    rows: int
    key: Hashable  # requests stack only with requests of the same key
    arrived: float
    future: asyncio.Future[Outputs]


@dataclass
class Observer:
    """Called once per executed batch (rows, seconds) and per finished request."""

    batch: Callable[[int, float], None] = lambda rows, seconds: None
    queued: Callable[[float], None] = lambda seconds: None


@dataclass
class Batcher:
    runners: list[Runner]
    batch_axes: dict[str, int | None]  # per input; None: a constant, fed whole
    max_rows: int
    max_delay_s: float
    max_queue: int
    observer: Observer = field(default_factory=Observer)
    # requests in the server now (queued, running, being read or answered)
    in_server: Callable[[], int] = lambda: 0

    def __post_init__(self) -> None:
        self._queue: collections.deque[_Pending] = collections.deque()
        self._arrived = asyncio.Event()
        self._idle: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(self.runners)):
            self._idle.put_nowait(i)
        self._pool = ThreadPoolExecutor(len(self.runners), thread_name_prefix="bakeoff-instance")
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._last_batch_requests = 1  # no company until requests overlap
        # seconds per row of the last lone request; None: none ran yet (to the thread)
        self._lone_row_s: float | None = None
        # the instance the dispatcher holds while it waits for a request: idle
        self._free: int | None = None

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._dispatch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for p in self._queue:
            if not p.future.done():
                p.future.set_exception(BatchFailed("the server stopped before this request ran"))
        self._queue.clear()
        if self._running:
            await asyncio.wait(self._running)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def infer(self, inputs: dict[str, np.ndarray], rows: int, key: Hashable) -> Outputs:
        """Queue one validated request of `rows` rows (never more than max_rows) and
        wait for its own rows of the batch it ran in."""
        assert rows <= self.max_rows
        if len(self._queue) >= self.max_queue:
            raise QueueFull(f"the queue is full ({self.max_queue} requests waiting)")
        loop = asyncio.get_running_loop()
        pending = _Pending(inputs, rows, key, time.perf_counter(), loop.create_future())
        self._queue.append(pending)
        self._arrived.set()
        return await pending.future

    def _alone(self, rows: int) -> bool:
        return not (
            self._free is None
            or self._queue
            or len(self.runners) > 1
            or self.in_server() > 1
            or self._lone_row_s is None
            or self._lone_row_s * rows > INLINE_MAX_S
        )

    async def run_now(
        self, inputs: dict[str, np.ndarray], rows: int, key: Hashable
    ) -> Outputs | None:
        """A lone request's outputs, run at once on this thread (see the module's
        docstring); None when it is not alone or the instance is not known to be
        quick, and then it goes through `infer`."""
        if not self._alone(rows):
            return None
        # Requests whose bytes have come but whose handlers have not started yet are
        # not counted in the server: two turns of the loop read them and start their
        # handlers. Without this, a run here would keep the loop from seeing them,
        # and concurrent clients would be served one by one, never batched.
        for _ in range(2):
            await asyncio.sleep(0)
        instance = self._free
        if instance is None or not self._alone(rows):
            return None
        loop = asyncio.get_running_loop()
        pending = _Pending(inputs, rows, key, time.perf_counter(), loop.create_future())
        outputs, executions = self._run_isolating(instance, [pending])
        self._timed_lone(executions)
        loop.call_soon(self._observe, executions, [0.0])
        result = outputs[0]
        if isinstance(result, Exception):
            raise _failure(result)
        return result

    async def _dispatch(self) -> None:
        while True:
            instance = await self._idle.get()
            self._free = instance
            try:
                first = await self._next()
            finally:
                self._free = None
            batch = await self._form(first)
            lone = len(self.runners) == 1 and len(batch) == 1 and self.in_server() <= 1
            task = asyncio.get_running_loop().create_task(self._execute(instance, batch, lone))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _next(self) -> _Pending:
        while True:
            while not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
            first = self._queue.popleft()
            if not first.future.done():  # a client that went away is dropped here
                return first

    async def _form(self, first: _Pending) -> list[_Pending]:
        batch, rows = [first], first.rows
        deadline = first.arrived + self.max_delay_s
        while rows < self.max_rows:
            if self._queue:
                nxt = self._queue[0]
                if nxt.future.done():
                    self._queue.popleft()
                    continue
                if nxt.key != first.key or rows + nxt.rows > self.max_rows:
                    break  # arrival order: it opens the next batch
                batch.append(self._queue.popleft())
                rows += nxt.rows
                continue
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            if len(batch) >= self._last_batch_requests and self.in_server() <= len(batch):
                break  # as many as last time, and nobody else in the server to wait for
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                break
        self._last_batch_requests = len(batch)
        taken = time.perf_counter()
        for p in batch:
            self.observer.queued(taken - p.arrived)
        return batch

    def _timed_lone(self, executions: list[tuple[int, float]]) -> None:
        # a lone request that failed is not timed: the next one goes to the thread
        self._lone_row_s = executions[0][1] / executions[0][0] if executions else None

    def _observe(self, executions: list[tuple[int, float]], queued: list[float]) -> None:
        for rows, seconds in executions:
            self.observer.batch(rows, seconds)
        for seconds in queued:
            self.observer.queued(seconds)

    async def _execute(self, instance: int, batch: list[_Pending], lone: bool) -> None:
        loop = asyncio.get_running_loop()
        try:
            outputs, executions = await loop.run_in_executor(
                self._pool, self._run_isolating, instance, batch
            )
        finally:
            self._idle.put_nowait(instance)
        if lone:
            self._timed_lone(executions)
        self._observe(executions, [])
        for p, result in zip(batch, outputs, strict=True):
            if p.future.done():
                continue
            if isinstance(result, Exception):
                p.future.set_exception(_failure(result))
            else:
                p.future.set_result(result)

    def _run_isolating(self, instance: int, batch: list[_Pending]) -> Results:
        """Each request's outputs or the runtime's error, and the executions made
        (rows, seconds). When a batch of several fails, each of its requests runs
        again alone: the one the runtime cannot take fails, its neighbours do not."""
        start = time.perf_counter()
        try:
            merged = self._run(instance, batch)
            return list(merged), [(sum(p.rows for p in batch), time.perf_counter() - start)]
        except Exception as exc:  # the runtime's own error
            if len(batch) == 1:
                return [exc], []
        results: list[Outputs | Exception] = []
        executions = []
        for p in batch:
            start = time.perf_counter()
            try:
                results.append(self._run(instance, [p])[0])
                executions.append((p.rows, time.perf_counter() - start))
            except Exception as exc:
                results.append(exc)
        return results, executions

    def _run(self, instance: int, batch: list[_Pending]) -> list[Outputs]:
        if len(batch) == 1:
            return [self.runners[instance](batch[0].inputs)]
        merged = {
            name: batch[0].inputs[name]
            if axis is None
            else np.concatenate([p.inputs[name] for p in batch], axis=axis)
            for name, axis in self.batch_axes.items()
        }
        outputs = self.runners[instance](merged)
        rows = sum(p.rows for p in batch)
        bounds = np.cumsum([p.rows for p in batch])[:-1]
        parts: list[Outputs] = [{} for _ in batch]
        for name, array in outputs.items():
            if array.ndim == 0 or array.shape[0] != rows:
                raise ValueError(
                    f"output {name} has shape {list(array.shape)}, not {rows} rows on axis 0: "
                    "it cannot be split back into the batch's requests"
                )
            for part, piece in zip(parts, np.split(array, bounds), strict=True):
                part[name] = piece
        return parts
