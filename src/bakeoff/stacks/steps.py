"""Steps of a training stack, the same code in the worker and in every rank.

A *driver* is what the worker's training side talks to. `LocalDriver` runs a
`Trainer` (the stack's `prepare`/`step`) in its own loop; a stack whose framework
owns the loop (Lightning's `Trainer.fit`) is a driver of its own. In a
multi-process stack each rank has its driver, and `bakeoff.distributed.ranks`
sends the same calls to every rank."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bakeoff import stacks
from bakeoff.stacks import trainers


@dataclass(frozen=True)
class Steps:
    """Consecutive steps: each one's time taking its batch (`data_ns`) and its whole
    time (batch and step, `step_ns`), its loss, and the whole block's time."""

    data_ns: list[int]
    step_ns: list[int]
    losses: list[float]
    block_ns: int


def run_steps(trainer: stacks.Trainer, order: Any, n: int, stop_on_nan: bool = True) -> Steps:
    """`n` steps on the next batches of the seed's order, each taken from the data as
    a training loop takes its next batch, inside the clock. A single process stops at
    a loss that is not finite; ranks take every step (a rank that stopped alone
    would leave the others waiting in their all-reduce)."""
    clock = time.perf_counter_ns
    data: list[int] = []
    step: list[int] = []
    losses: list[float] = []
    start = clock()
    for _ in range(n):
        t0 = clock()
        prepared = trainer.prepare(next(order))
        t1 = clock()
        loss = trainer.step(prepared)
        t2 = clock()
        data.append(t1 - t0)
        step.append(t2 - t0)
        losses.append(loss)
        if stop_on_nan and not math.isfinite(loss):
            break
    return Steps(data, step, losses, clock() - start)


# Steps taken after the save, and again after the reload: the first one's loss
# shows the weights came back, the second one's that the optimizer state did too
# (the first update is the optimizer's, from its moments and step count).
CHECKPOINT_STEPS = 2


def checkpoint_check(trainer: stacks.Trainer, order: Any, path: str) -> dict[str, Any]:
    """Save, take the next steps, load what was saved and take the same steps again:
    their losses must be equal bit for bit on a CPU."""
    suffix = getattr(trainer, "checkpoint_suffix", "")
    path = path if path.endswith(suffix) else path + suffix
    t0 = time.perf_counter()
    trainer.save(path)
    save_s = time.perf_counter() - t0
    batches = [trainer.prepare(next(order)) for _ in range(CHECKPOINT_STEPS)]
    before = [trainer.step(b) for b in batches]
    t0 = time.perf_counter()
    trainer.load(path)
    load_s = time.perf_counter() - t0
    after = [trainer.step(b) for b in batches]
    return checkpoint_figures(
        path, save_s, load_s, before, after, getattr(trainer, "checkpoint_format", "its own")
    )


def checkpoint_figures(
    path: str, save_s: float, load_s: float, before: list[float], after: list[float], form: str
) -> dict[str, Any]:
    """What the checkpoint check reports: the next steps' losses without the reload
    (`before`) and with it (`after`) must be equal bit for bit."""
    return {
        "save_s": save_s,
        "load_s": load_s,
        "size_mb": _size(Path(path)) / 2**20,
        "reload_identical": before == after,
        "losses_without_reload": before,
        "losses_after_reload": after,
        "steps_compared": len(before),
        "format": form,
    }


def _size(path: Path) -> int:
    """A checkpoint's bytes: its file, or every file in its folder (DCP writes one)."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


class Driver(Protocol):
    rows: int
    settings: dict[str, Any]
    processes: int

    def steps(self, n: int) -> Steps: ...

    def initial_loss(self) -> float: ...

    def evaluate(self) -> float: ...

    def checkpoint(self, path: str) -> dict[str, Any]: ...

    def communication_ns(self) -> int | None:
        """How long gradient communication has been in flight so far (0 without any;
        None where the stack's communication is not timed)."""
        ...

    def close(self) -> None: ...


class LocalDriver:
    """A stack's `Trainer`, stepped by our own loop (in the worker, or in a rank,
    where it takes every step even past a loss that is not finite)."""

    processes = 1

    def __init__(self, spec: Any, stop_on_nan: bool = True) -> None:
        self.trainer = trainers.trainer(spec)
        self.spec = spec
        self.stop_on_nan = stop_on_nan
        self.rows = self.trainer.rows
        self.settings = self.trainer.settings
        self.order = stacks.batches(self.rows, spec.batch_size, spec.seed)

    def steps(self, n: int) -> Steps:
        return run_steps(self.trainer, self.order, n, self.stop_on_nan)

    def initial_loss(self) -> float:
        # The first batch of the seed's order, from a generator of its own: the check
        # takes nothing from the order the timed steps go through.
        first = next(stacks.batches(self.rows, self.spec.batch_size, self.spec.seed))
        return self.trainer.initial_loss(self.trainer.prepare(first))

    def evaluate(self) -> float:
        return self.trainer.evaluate()

    def checkpoint(self, path: str) -> dict[str, Any]:
        return checkpoint_check(self.trainer, self.order, path)

    def communication_ns(self) -> int | None:
        comm = getattr(self.trainer, "comm_ns", 0)
        return None if comm is None else int(comm)

    def close(self) -> None:
        pass
