"""Loading the first batch size's workers beside the builds: the builds' slots run
the highest priority first, a worker loaded early is handed to the engine with the
reply it gave, and --quick leaves out the runtimes that compile at load."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

import pytest

from bakeoff.backends import Variant
from bakeoff.inference import pipeline
from bakeoff.inference.early import Preloads
from bakeoff.inference.messages import JobBase, LoadJob, LoadSpec
from bakeoff.inference.options import RunOptions
from bakeoff.inference.variants import _Slots
from bakeoff.loader import load_workload
from bakeoff.source import ModelSource
from bakeoff.trials.jobs import Command, Job, Measure, Timed
from bakeoff.trials.launcher import WorkerFailed


def _job(where: Path, cid: str) -> LoadJob:
    """A measuring job (never run here: the launchers below are scripted)."""
    base = JobBase(
        source=ModelSource("fake", None, None, None),
        data_path=str(where / "data.npz"),
        input_names=("input",),
        artifacts_dir=str(where / "artifacts"),
    )
    variant = Variant("fake", cid.split("-")[1])
    return LoadJob(
        base=base, load=LoadSpec(variant, {}, 1, 1, {}, cid), outputs_path=str(where / f"{cid}.npy")
    )


def test_the_builds_slots_run_the_lowest_priority_first() -> None:
    """One slot, busy while four calls queue: they run by priority, ties in the
    order they came, and one queued after a call ended is weighed against those
    still waiting."""
    ran: list[str] = []
    gate = threading.Event()
    with _Slots(1) as slots:
        pending: set[Future[Any]] = {slots.submit(0, gate.wait)}
        for priority, name in ((3, "load a"), (2, "build a"), (3, "load b"), (2, "build b")):
            pending.add(slots.submit(priority, ran.append, name))
        slots.dispatch()
        gate.set()
        late = False
        while pending:
            _, pending = wait(pending, return_when=FIRST_COMPLETED)
            if not late:  # queued when the first call ended: before the loads
                pending.add(slots.submit(1, ran.append, "compiling load"))
                late = True
            slots.dispatch()
    assert ran == ["compiling load", "build a", "build b", "load a", "load b"]


class _Worker:
    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers, self.closed = answers, False

    def reply(self, timeout: float) -> dict[str, Any]:
        return self.answers.pop(0)

    def request(self, cmd: Command, timeout: float) -> dict[str, Any]:
        return self.reply(timeout)

    def measure(self, cmd: Measure, timeout: float) -> Timed:
        raise AssertionError("not timed here")

    def close(self) -> None:
        self.closed = True


class _Launcher:
    """Starts scripted workers and counts the starts (no runtime is involved: this
    tests the hand-over, not a load)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.jobs: list[Job] = []
        self.workers: list[_Worker] = []

    def start(self, job: Job, name: str) -> _Worker:
        self.started.append(name)
        self.jobs.append(job)
        self.workers.append(_Worker([{"ok": True, "n": len(self.started)}, {"ok": True}]))
        return self.workers[-1]

    def run(self, job: Job, name: str, timeout: float) -> dict[str, Any]:
        raise AssertionError("no one-shot jobs here")


def test_a_worker_loaded_early_is_handed_back_once_with_its_reply(tmp_path: Path) -> None:
    """The engine's start for a job loaded early gets that worker and the ready
    message it gave; a second start for the same job is a new process."""
    inner = _Launcher()
    preloads = Preloads(inner)
    job = _job(tmp_path, "fake-fp32-b1")
    seen: list[Any] = []
    assert preloads.load(job, "fake-fp32-b1", 10.0, seen.append) == {"ok": True, "n": 1}
    assert seen == [inner.workers[0]]
    worker = preloads.start(job, "fake-fp32-b1")
    assert worker.reply(10.0) == {"ok": True, "n": 1}  # the ready message it gave then
    assert worker.request(Measure(calls=1), 10.0) == {"ok": True}
    assert inner.started == ["fake-fp32-b1"]  # not started again
    # Loaded beside the builds, a compile runs in its own process only.
    assert inner.jobs[0].compile_threads == 1 and job.compile_threads is None
    again = preloads.start(job, "fake-fp32-b1")  # a second process for the same job
    assert again.reply(10.0)["n"] == 2 and inner.started == ["fake-fp32-b1"] * 2
    assert inner.jobs[1] is job  # in its turn: the compile as the job asks
    # One nobody asks for is ended when the run closes them.
    other = _job(tmp_path, "fake-int8-b1")
    preloads.load(other, "fake-int8-b1", 10.0, seen.append)
    preloads.close()
    assert inner.workers[-1].closed and not inner.workers[0].closed


class _Dying(_Worker):
    def reply(self, timeout: float) -> dict[str, Any]:
        raise WorkerFailed("worker killed by signal SIGKILL (9)")


def test_a_load_that_failed_early_fails_when_the_engine_asks(tmp_path: Path) -> None:
    """A worker that died while loading early: the engine's start gets the failure
    as that load's own, to report it like any load that fails."""

    class Failing(_Launcher):
        def start(self, job: Job, name: str) -> _Worker:
            return _Dying([])

    preloads = Preloads(Failing())
    job = _job(tmp_path, "fake-fp32-b1")
    failed = preloads.load(job, "x", 1.0, lambda w: None)
    assert isinstance(failed, WorkerFailed)
    with pytest.raises(WorkerFailed, match="SIGKILL"):
        preloads.start(job, "x").reply(1.0)


@pytest.mark.parametrize(
    ("quick", "runtimes", "kept"),
    [(False, None, True), (True, None, False), (True, ["torch", "torch-compile"], True)],
)
def test_quick_leaves_out_runtimes_that_compile_at_load_unless_named(
    quick: bool, runtimes: list[str] | None, kept: bool
) -> None:
    workload = load_workload("builtin:minilm")
    opts = RunOptions(quick=quick, runtimes=runtimes)
    grid = pipeline._grid(workload, opts, pipeline.advice_for(workload, None))
    assert ("torch-compile" in grid.runtimes) is kept
    if kept:
        assert "torch-compile" not in grid.left_out
    else:
        why = grid.left_out["torch-compile"]
        assert why.startswith("--quick leaves it out") and "--runtimes" in why
    # One conversion per runtime and precision with --quick, where bakeoff chose
    # the runtimes: OpenVINO's direct FP32 IR waits for a full run.
    direct = grid.left_out.get("openvino-fp32-direct", "")
    assert direct.startswith("--quick builds one conversion") is (quick and runtimes is None)
    ids = {
        c.variant.id
        for c in pipeline._candidates(workload, opts, grid, [1])
        if c.status == "pending"
    }
    openvino = "openvino" in grid.runtimes
    assert ("openvino-fp32-direct" in ids) is (openvino and not (quick and runtimes is None))
    assert ("openvino-fp32" in ids) is openvino


def test_quick_keeps_the_models_own_runtime_even_where_it_compiles(tmp_path: Path) -> None:
    """A JAX function's reference is JAX, which compiles at load: --quick keeps it."""
    workload = dataclasses.replace(
        load_workload("builtin:digits"), source=ModelSource("jax", None, None, None)
    )
    opts = RunOptions(quick=True)
    grid = pipeline._grid(workload, opts, pipeline.advice_for(workload, None))
    assert grid.grid_from["runtimes"] in ("defaults", "advice")  # bakeoff chose them
    assert "jax" in grid.runtimes and "jax" not in grid.left_out
