"""The worker side of training: a `TrainJob`'s timed steps and a `TargetJob`'s run
to the end of the recipe (called from `bakeoff.trials.worker`)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff import stacks
from bakeoff.trials.jobs import (
    Command,
    Exit,
    JobError,
    Measure,
    Peak,
    TargetJob,
    Timed,
    TrainJob,
    TrainSpec,
    Warmup,
)
from bakeoff.trials.memory import PeakMemory


class Training:
    """A trainer answering the trial engine: each timed call is one optimizer step on
    the next batch of the seed's data order (its batch taken from the data as a
    training loop would, inside the clock)."""

    def __init__(self, trainer: stacks.Trainer, spec: TrainSpec) -> None:
        self.trainer = trainer
        self.order = stacks.batches(trainer.rows, spec.batch_size, spec.seed)
        self.memory = PeakMemory()
        self.clock: Callable[[], int] = time.perf_counter_ns

    def one(self) -> tuple[int, float]:
        t0 = self.clock()
        loss = self.trainer.step(self.trainer.prepare(next(self.order)))
        return self.clock() - t0, loss

    def warm_up(self, cmd: Warmup) -> dict[str, Any]:
        lat: list[int] = []
        deadline = self.clock() + int(cmd.seconds * 1e9)
        while len(lat) < cmd.min_calls or self.clock() < deadline:
            lat.append(self.one()[0])
            if len(lat) >= cmd.max_calls:
                break
        return {"latency_ns": lat}

    def measure(self, cmd: Measure) -> dict[str, Any]:
        for _ in range(cmd.settle):
            self.one()
        start = self.clock()
        lat = [self.one()[0] for _ in range(cmd.calls)]
        return Timed(lat, self.clock() - start).to_json()

    def answer(self, cmd: Command) -> dict[str, Any]:
        match cmd:
            case Warmup():
                return self.warm_up(cmd)
            case Measure():
                return self.measure(cmd)
            case Peak() | Exit():
                return {"peak_rss_mb": self.memory.mb()}
            case _:
                raise JobError(
                    f"a training worker answers warmup, measure, peak and exit, not {cmd.kind!r}"
                )


def start_training(job: TrainJob, started: float) -> tuple[dict[str, Any], Training]:
    """The trainer built and its first step timed: the ready message, and what
    answers the engine's commands after it."""
    trainer = stacks.trainer(job.train)
    load_s = time.perf_counter() - started
    training = Training(trainer, job.train)
    # The first batch of the seed's order, from a generator of its own: the check
    # takes nothing from the order the timed steps go through.
    first = next(stacks.batches(trainer.rows, job.train.batch_size, job.train.seed))
    first_loss = trainer.initial_loss(trainer.prepare(first))
    first_ns, _ = training.one()
    training.memory.loaded()
    ready = {
        "ok": True,
        "event": "ready",
        "load_s": load_s,
        "first_call_s": first_ns / 1e9,
        "settings": trainer.settings,
        "model_bytes": None,
        "pid": os.getpid(),
        "worker": {"first_loss": first_loss, "peak_memory": training.memory.scope()},
    }
    return ready, training


def do_target(job: TargetJob) -> dict[str, Any]:
    """The seed's whole recipe: step times (evaluation apart), the loss curve, each
    evaluation, when the target was first reached, whether the loss diverged, the
    share of step time spent getting the batch, and the checkpoint's figures."""
    trainer = stacks.trainer(job.train)
    order = stacks.batches(trainer.rows, job.train.batch_size, job.train.seed)
    clock = time.perf_counter
    step_s: list[float] = []
    data_s: list[float] = []
    losses: list[float] = []
    evals: list[list[float]] = []  # [step, metric, training seconds so far]
    reached: float | None = None
    reached_step: int | None = None
    diverged = False
    for step in range(1, job.max_steps + 1):
        t0 = clock()
        prepared = trainer.prepare(next(order))
        t1 = clock()
        loss = trainer.step(prepared)
        t2 = clock()
        data_s.append(t1 - t0)
        step_s.append(t2 - t0)
        losses.append(loss)
        if not math.isfinite(loss):
            diverged = True
            break
        if step % job.eval_every == 0 or step == job.max_steps:
            metric = trainer.evaluate()
            evals.append([step, metric, sum(step_s)])
            if reached is None and metric >= job.target:
                reached, reached_step = sum(step_s), step
    # The first step pays for what the stack builds then (torch.compile compiles):
    # that is reported apart, and not counted in the time to the target.
    typical = float(np.median(step_s[1:11])) if len(step_s) > 1 else 0.0
    compile_s = max(0.0, step_s[0] - typical) if step_s else 0.0
    out: dict[str, Any] = {
        "ok": True,
        "steps": len(step_s),
        "losses": losses,
        "evals": evals,
        "time_to_target_s": None if reached is None else reached - compile_s,
        "steps_to_target": reached_step,
        "final_metric": evals[-1][1] if evals else None,
        "diverged": diverged,
        "compile_s": compile_s,
        "train_s": sum(step_s) - compile_s,
        # From the second step on: the first one's compile is no step's usual time.
        "data_wait_share": sum(data_s[1:]) / sum(step_s[1:]) if len(step_s) > 1 else None,
        "settings": trainer.settings,
    }
    if job.checkpoint_path and not diverged:
        out["checkpoint"] = _checkpoint(trainer, order, job.checkpoint_path)
    return out


def _checkpoint(trainer: stacks.Trainer, order: Any, path: str) -> dict[str, Any]:
    """Save, take the next step, load what was saved and take the same step again:
    the two losses must be equal bit for bit on a CPU."""
    t0 = time.perf_counter()
    trainer.save(path)
    save_s = time.perf_counter() - t0
    batch = trainer.prepare(next(order))
    before = trainer.step(batch)
    t0 = time.perf_counter()
    trainer.load(path)
    load_s = time.perf_counter() - t0
    after = trainer.step(batch)
    return {
        "save_s": save_s,
        "load_s": load_s,
        "size_mb": Path(path).stat().st_size / 2**20,
        "reload_identical": before == after,
        "losses": [before, after],
    }
