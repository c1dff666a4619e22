"""A framework's own training loop (Lightning's `Trainer.fit`, fastai's `Learner.fit`)
run in a thread of the worker, parked between steps until the driver grants more.

The loop's callback calls `park` when the loop is set up and after each step's end,
`fetched` when a step has its batch; the driver calls `run(n)` to let `n` steps go
and gets each one's data wait, its whole time and its loss. A step's time runs
from the release (or the end of the step before) to the end of its own step: the
clock never includes the parked wait."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from bakeoff.stacks.steps import Steps


class Stopped(Exception):
    """Raised in the loop's thread by `park` when the driver closes."""


class Parking:
    def __init__(self, stop_with: Callable[[], BaseException] = Stopped) -> None:
        self.stop_with = stop_with  # what `park` raises in the loop to end it
        self.cv = threading.Condition()
        self.permits = 0
        self.parked = False
        self.stopping = False
        self.done = False
        self.records: list[tuple[int, int, float]] = []
        self.started = 0
        self.data_ns = 0
        self.loss = math.nan

    # -- the loop's side
    def park(self) -> None:
        with self.cv:
            self.parked = True
            self.cv.notify_all()
            while self.permits == 0 and not self.stopping:
                self.cv.wait()
            if self.stopping:
                raise self.stop_with()
            self.permits -= 1
            self.parked = False
        self.started = time.perf_counter_ns()

    def fetched(self) -> None:
        """The step has its batch: the loader's part of the data wait ends here."""
        self.data_ns = time.perf_counter_ns() - self.started

    def step_ended(self) -> None:
        ended = time.perf_counter_ns()
        with self.cv:
            self.records.append((self.data_ns, ended - self.started, self.loss))
        self.park()

    def finished(self) -> None:
        with self.cv:
            self.done = True
            self.cv.notify_all()

    # -- the driver's side
    def wait_parked(self, alive: Callable[[], None]) -> None:
        with self.cv:
            while not self.parked and not self.done:
                self.cv.wait(timeout=1.0)
        alive()

    def run(self, n: int, alive: Callable[[], None]) -> list[tuple[int, int, float]]:
        with self.cv:
            first = len(self.records)
            self.permits += n
            self.parked = False
            self.cv.notify_all()
            while not (len(self.records) >= first + n and self.parked) and not self.done:
                self.cv.wait(timeout=1.0)
            found = self.records[first : first + n]
        if len(found) < n:
            alive()
        return found

    def steps(self, n: int, alive: Callable[[], None]) -> Steps:
        """`n` steps let go, as the driver reports them."""
        records = self.run(n, alive)
        return Steps(
            data_ns=[r[0] for r in records],
            step_ns=[r[1] for r in records],
            losses=[r[2] for r in records],
            block_ns=sum(r[1] for r in records),
        )

    def stop(self) -> None:
        with self.cv:
            self.stopping = True
            self.cv.notify_all()


def check_alive(loop: str, error: BaseException | None, thread: threading.Thread) -> None:
    """Why the loop's thread gave no more steps, raised; nothing while it is alive."""
    if error is not None:
        raise RuntimeError(f"{loop} stopped: {type(error).__name__}: {error}")
    if not thread.is_alive():
        raise RuntimeError(f"{loop} ended before the steps asked for")
