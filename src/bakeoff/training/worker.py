"""The worker side of training: a `TrainJob`'s timed steps and a `TargetJob`'s run
to the end of the recipe (run as ``python -m bakeoff.training.worker FD``,
through the loop every worker runs, `trials.worker.serve`). A single-process
stack trains in this process; a multi-process one in ranks this process starts and
drives (`distributed.ranks`, `distributed.nodes`), through the same calls."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from bakeoff import stacks
from bakeoff.stacks import drivers
from bakeoff.stacks.spec import TrainSpec
from bakeoff.stacks.steps import Driver, Steps
from bakeoff.training.messages import JOBS, TargetJob, TrainJob
from bakeoff.trials.jobs import Exit, Job, JobError, Measure, Peak, Timed, Warmup
from bakeoff.trials.memory import PeakMemory
from bakeoff.trials.worker import Handlers, answer_until_exit, send, serve


def driver(spec: TrainSpec) -> Driver:
    """Where the stack trains: here, in ranks under torchrun, or in ranks on a Ray
    cluster's nodes."""
    if spec.cluster_address:
        from bakeoff.distributed.nodes import NodeRanks

        return NodeRanks(spec)
    if spec.processes > 1 or stacks.BY_NAME[spec.stack].launched:
        from bakeoff.distributed.ranks import RankGroup

        return RankGroup(spec)
    return drivers.driver(spec)


def _peaks(driver: Driver, memory: PeakMemory) -> list[float]:
    """Each process's peak resident memory: the ranks' own, or this process's."""
    ranks = getattr(driver, "peak_mb", None)
    return ranks() if ranks is not None else [memory.mb()]


def _communication_share(driver: Driver, since: int | None, step_ns: int) -> float | None:
    """The share of step time gradient communication was in flight since `since`
    (multi-process stacks whose communication is timed; it overlaps the backward
    pass where the stack overlaps it)."""
    now = driver.communication_ns()
    if driver.processes == 1 or not step_ns or now is None or since is None:
        return None
    return (now - since) / step_ns


class Training:
    """A stack answering the trial engine: each timed call is one optimizer step on
    the next batch of the seed's data order."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.memory = PeakMemory()
        self.clock: Callable[[], int] = time.perf_counter_ns
        self.step_ns = 0  # every step's time so far, for the communication share
        self.comm_from = driver.communication_ns()

    def steps(self, n: int) -> Steps:
        done = self.driver.steps(n)
        self.step_ns += sum(done.step_ns)
        return done

    def warm_up(self, cmd: Warmup) -> dict[str, Any]:
        # In blocks, so that ranks take their steps together: the first the fewest
        # calls asked for, then as many as the time left should hold at that pace.
        lat: list[int] = []
        deadline = self.clock() + int(cmd.seconds * 1e9)
        n = max(1, min(cmd.min_calls, cmd.max_calls))
        while n > 0:
            lat += self.steps(n).step_ns
            left = deadline - self.clock()
            if left <= 0 or len(lat) >= cmd.max_calls:
                break
            pace = max(1, int(np.median(lat)))
            n = max(1, min(cmd.max_calls - len(lat), left // pace))
        return {"latency_ns": lat}

    def measure(self, cmd: Measure) -> dict[str, Any]:
        if cmd.settle:
            self.steps(cmd.settle)
        done = self.steps(cmd.calls)
        return Timed(done.step_ns, done.block_ns).to_json()

    def at_exit(self) -> dict[str, Any]:
        ranks = _peaks(self.driver, self.memory)
        return {
            "peak_rss_mb": max(ranks),
            "worker": {
                "peak_rss_mb_ranks": ranks,
                "communication_share": _communication_share(
                    self.driver, self.comm_from, self.step_ns
                ),
            },
        }

    def exit(self, _cmd: Exit) -> dict[str, Any]:
        try:
            return self.at_exit()
        finally:
            self.driver.close()

    def handlers(self) -> Handlers:
        return {
            Warmup: self.warm_up,
            Measure: self.measure,
            Peak: lambda _cmd: self.at_exit(),
            Exit: self.exit,
        }


def start_training(job: TrainJob, started: float) -> tuple[dict[str, Any], Training]:
    """The stack built and its first step timed: the ready message, and what answers
    the engine's commands after it."""
    found = driver(job.train)
    load_s = time.perf_counter() - started
    first_loss = found.initial_loss()
    first = found.steps(1)
    ready = {
        "ok": True,
        "event": "ready",
        "load_s": load_s,
        "first_call_s": first.step_ns[0] / 1e9,
        "settings": found.settings,
        "model_bytes": None,
        "pid": os.getpid(),
        "worker": {
            "first_loss": first_loss,
            "peak_memory": "each process's peak resident memory, from its start"
            + (" (the ranks')" if found.processes > 1 else ""),
        },
    }
    return ready, Training(found)


def do_target(job: TargetJob) -> dict[str, Any]:
    """The seed's whole recipe: step times (evaluation apart), the loss curve, each
    evaluation, when the target was first reached, whether the loss diverged, the
    share of step time spent getting the batch, and the checkpoint's figures."""
    found = driver(job.train)
    memory = PeakMemory()
    try:
        out = _to_target(found, job)
        out["peak_rss_mb_ranks"] = _peaks(found, memory)
        return out
    finally:
        found.close()


def _to_target(found: Driver, job: TargetJob) -> dict[str, Any]:
    comm_from = found.communication_ns()
    step_s: list[float] = []
    data_s: list[float] = []
    losses: list[float] = []
    evals: list[list[float]] = []  # [step, metric, training seconds so far]
    reached: float | None = None
    reached_step: int | None = None
    diverged = False
    while len(step_s) < job.max_steps and not diverged:
        # Up to the next evaluation (or the recipe's end) in one block.
        done = len(step_s)
        block = min(job.eval_every - done % job.eval_every, job.max_steps - done)
        steps = found.steps(block)
        for data_ns, step_ns, loss in zip(steps.data_ns, steps.step_ns, steps.losses, strict=True):
            data_s.append(data_ns / 1e9)
            step_s.append(step_ns / 1e9)
            losses.append(loss)
            if not math.isfinite(loss):
                diverged = True  # what ranks took after it is not the recipe's
                break
        step = len(step_s)
        if not diverged and (step % job.eval_every == 0 or step == job.max_steps):
            metric = found.evaluate()
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
        "communication_share": _communication_share(found, comm_from, int(sum(step_s) * 1e9)),
        "settings": found.settings,
    }
    if job.checkpoint_path and not diverged:
        out["checkpoint"] = found.checkpoint(job.checkpoint_path)
    return out


def run(conn: Connection, job: Job, started: float) -> None:
    match job:
        case TrainJob():
            ready, training = start_training(job, started)
            send(conn, ready)
            answer_until_exit(conn, training.handlers())
        case TargetJob():
            send(conn, do_target(job))
        case _:
            raise JobError(f"a training worker does not run {job.kind!r} jobs")


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), JOBS, run))
