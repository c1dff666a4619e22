"""The worker: its typed jobs and commands on the wire, how it answers one it cannot
read, and its import clock (the import share of a cold start: docs/method.md rule 3)."""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import json
import os
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bakeoff.backends import Variant
from bakeoff.generation import messages as generation_messages
from bakeoff.generation.messages import Arrivals, Concurrent, GenerateJob, GenerateSpec
from bakeoff.inference import messages as inference_messages
from bakeoff.inference.messages import (
    BuildJob,
    ColdStartJob,
    JobBase,
    LoadJob,
    LoadSpec,
    Offline,
    Rebatch,
    ReferenceJob,
    Server,
)
from bakeoff.inference.worker import ImportClock
from bakeoff.judge.outputs import OutputGate, OutputRule
from bakeoff.source import ModelSource
from bakeoff.stacks.spec import TrainSpec
from bakeoff.training import messages as training_messages
from bakeoff.training.messages import TargetJob, TrainJob
from bakeoff.trials.jobs import Exit, JobError, Measure, Peak, Timed, Warmup, message_from_json
from bakeoff.trials.launcher import WorkerFailed, WorkerProcess

KINDS = (inference_messages, training_messages, generation_messages)
# Every kind's jobs and commands: each kind reads its own (`<kind>.messages`).
JOBS = {k: v for kind in KINDS for k, v in kind.JOBS.items()}
COMMANDS = {k: v for kind in KINDS for k, v in kind.COMMANDS.items()}


def job_from_json(data: Any) -> Any:
    return message_from_json(JOBS, data)


def command_from_json(data: Any) -> Any:
    return message_from_json(COMMANDS, data)


def _slow_modules(tmp_path: Path, prefix: str) -> tuple[str, str]:
    """An outer module that sleeps 0.2 s and imports an inner one that sleeps 0.2 s."""
    outer, inner = f"{prefix}_outer", f"{prefix}_inner"
    (tmp_path / f"{inner}.py").write_text("import time\ntime.sleep(0.2)\n")
    (tmp_path / f"{outer}.py").write_text(f"import time\nimport {inner}\ntime.sleep(0.2)\n")
    return outer, inner


@pytest.mark.parametrize("how", ["statement", "import_module"])
def test_the_import_clock_counts_both_ways_of_importing_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    outer, inner = _slow_modules(tmp_path, f"bakeoff_clock_{how}")
    try:
        started = time.perf_counter()
        with ImportClock() as clock:
            if how == "statement":
                exec(f"import {outer}", {})
            else:
                importlib.import_module(outer)
        elapsed = time.perf_counter() - started
        assert outer in sys.modules and inner in sys.modules
        # Both sleeps are inside the clocked import...
        assert clock.seconds >= 0.4
        # ...and the nested import is not counted a second time on top.
        assert clock.seconds <= elapsed
    finally:
        sys.modules.pop(outer, None)
        sys.modules.pop(inner, None)


def test_the_import_clock_puts_the_import_functions_back() -> None:
    before = (builtins.__import__, importlib.import_module)
    with pytest.raises(RuntimeError), ImportClock():
        assert builtins.__import__ is not before[0]
        assert importlib.import_module is not before[1]
        raise RuntimeError("a load that fails")
    assert (builtins.__import__, importlib.import_module) == before


# ---- typed jobs and commands


def _base(data_path: str = "/data/run/data.npz") -> JobBase:
    source = ModelSource(
        kind="fake",
        factory=None,
        path=None,
        base_dir=None,
        options={"latency_ms": {"fp32": 2.0, "int8": 1.0}, "jitter": 0.0},
        variable_axes={"input": [1]},
        batch_axes={"input": 0},
    )
    return JobBase(
        source=source,
        data_path=data_path,
        input_names=("input",),
        artifacts_dir="/data/run/artifacts",
        gate=OutputGate(
            OutputRule("cosine", 0.02), ("scores",), {"scores": OutputRule("agreement", 0.05)}
        ),
        skip_unneeded=False,
    )


def _spec(**changes: Any) -> LoadSpec:
    spec = LoadSpec(
        variant=Variant("fake", "int8", "dynamic"),
        artifact={"path": "/data/run/artifacts/m.onnx", "exporter": "dynamo"},
        batch_size=8,
        threads=2,
        options={"threads": 2},
        candidate_id="fake-int8-dynamic-b8",
    )
    return dataclasses.replace(spec, **changes)


TRAIN_SPEC = TrainSpec(
    stack="torch-accumulate",
    factory="bakeoff.builtins.digits:untrained",
    init_path="/data/run/init-seed0.safetensors",
    data_path="/data/run/data.npz",
    seed=0,
    batch_size=64,
    lr=2e-3,
    threads=2,
    candidate_id="torch-accumulate",
)
JOB_EXAMPLES = [
    BuildJob(base=_base(), variant=Variant("fake", "fp32"), build_threads=2),
    ReferenceJob(base=_base(), load=_spec(), outputs_path="/data/run/reference.npy"),
    ColdStartJob(base=_base(), load=_spec(), cpus=(0, 1)),
    LoadJob(base=_base(), load=_spec(streams=2), outputs_path="/data/run/outputs/x.npy", cpus=(3,)),
    TrainJob(train=TRAIN_SPEC),
    TargetJob(train=TRAIN_SPEC, max_steps=400, eval_every=20, target=0.95, checkpoint_path="/c"),
    GenerateJob(
        generate=GenerateSpec(
            runtime="llama-cpp",
            precision="q8_0",
            folder="/data/model",
            artifacts_dir="/data/run/artifacts/llama-cpp",
            inputs_path="/data/run/inputs.json",
            outputs_path="/data/run/outputs/llama-cpp-q8_0.json",
            max_new_tokens=32,
            threads=2,
            candidate_id="llama-cpp-q8_0",
        )
    ),
]
COMMAND_EXAMPLES = [
    Warmup(seconds=0.5, min_calls=10),
    Measure(calls=1000, settle=3),
    Server(
        single_stream_s=0.002,
        bound_ms=100.0,
        duration_s=10.0,
        min_queries=64,
        steps=6,
        out_dir="/data/run/loadgen/c",
        seed=0,
    ),
    Offline(
        concurrency=2, expected_sps=1234.5, duration_s=5.0, out_dir="/data/run/loadgen/o", seed=1
    ),
    Rebatch(batch_size=32, outputs_path="/data/run/outputs/c-b32.npy"),
    Concurrent(concurrency=4, passes=2),
    Arrivals(rate_per_s=2.5, requests=8, seed=3, max_batch=4),
    Peak(),
    Exit(),
]


def test_each_kinds_worker_answers_exactly_its_commands(tmp_path: Path) -> None:
    """What a worker reads (`<kind>.messages.COMMANDS`) is what it has handlers for."""
    from bakeoff.generation.worker import Generating
    from bakeoff.inference.worker import Serving
    from bakeoff.training.worker import Training

    for kind, worker in (
        (inference_messages, Serving),
        (training_messages, Training),
        (generation_messages, Generating),
    ):
        handlers = worker.handlers(object.__new__(worker))  # handlers only name methods
        assert set(handlers) == set(kind.COMMANDS.values()), kind.__name__
        assert {j.worker for j in kind.JOBS.values()} == {worker.__module__}


def test_every_kind_of_job_and_command_has_an_example() -> None:
    assert {type(j) for j in JOB_EXAMPLES} == set(JOBS.values())
    assert {type(c) for c in COMMAND_EXAMPLES} == set(COMMANDS.values())


@pytest.mark.parametrize("job", JOB_EXAMPLES, ids=lambda j: j.kind)
def test_a_job_round_trips_through_json(job: Any) -> None:
    data = job.to_json()
    assert data["kind"] == job.kind
    assert type(job).from_json(data) == job
    assert job_from_json(data) == job
    wire = json.loads(json.dumps(data))  # what crosses the socket pair
    assert wire == data
    assert job_from_json(wire) == job


@pytest.mark.parametrize("cmd", COMMAND_EXAMPLES, ids=lambda c: c.kind)
def test_a_command_round_trips_through_json(cmd: Any) -> None:
    data = cmd.to_json()
    assert data["kind"] == cmd.kind
    assert type(cmd).from_json(data) == cmd
    assert command_from_json(json.loads(json.dumps(data))) == cmd


def test_the_measure_reply_round_trips_and_ignores_the_channels_ok() -> None:
    timed = Timed(latency_ns=[1200, 1100, 1150], block_ns=4000)
    wire = json.loads(json.dumps({"ok": True, **timed.to_json()}))
    assert Timed.from_json(wire) == timed
    with pytest.raises(JobError, match="'block_ns'"):
        Timed.from_json({"ok": True, "latency_ns": [1]})
    # a generation worker's per-request figures beside the timed one
    requests = Timed([300, 310], 9000, {"ttft_ns": [2000, 2100], "tokens": [32, 32]})
    assert Timed.from_json(json.loads(json.dumps(requests.to_json()))) == requests
    with pytest.raises(JobError, match=r"extra\.tokens"):
        Timed.from_json({"latency_ns": [1], "block_ns": 2, "extra": {"tokens": ["x"]}})


def test_a_job_decoded_from_json_has_its_types_back() -> None:
    job = job_from_json(json.loads(json.dumps(JOB_EXAMPLES[2].to_json())))
    assert isinstance(job, ColdStartJob)
    assert isinstance(job.base.source, ModelSource) and isinstance(job.load.variant, Variant)
    assert job.base.input_names == ("input",) and job.cpus == (0, 1)


def test_a_float_field_takes_a_whole_number() -> None:
    assert command_from_json({"kind": "warmup", "seconds": 1, "min_calls": 2}) == Warmup(
        seconds=1.0, min_calls=2
    )


def _without(data: dict[str, Any], *path: str) -> dict[str, Any]:
    data = json.loads(json.dumps(data))
    inner = data
    for key in path[:-1]:
        inner = inner[key]
    del inner[path[-1]]
    return data


def _with(data: dict[str, Any], value: Any, *path: str) -> dict[str, Any]:
    data = json.loads(json.dumps(data))
    inner = data
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return data


LOAD = JOB_EXAMPLES[3].to_json()


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (
            {"kind": "fit"},
            [
                "unknown job kind 'fit'",
                "known: build, coldstart, generate, load, reference, target, train",
            ],
        ),
        ({"kind": "warmup", "seconds": 1.0, "min_calls": 1}, ["unknown job kind 'warmup'"]),
        ({"cmd": "load"}, ["without a 'kind' field"]),
        ([1, 2], ["must be a JSON object"]),
        (_without(LOAD, "outputs_path"), ["job 'load'", "missing field 'outputs_path'"]),
        (_without(LOAD, "load", "batch_size"), ["missing field 'load.batch_size'"]),
        (_without(LOAD, "base", "source", "kind"), ["missing field 'base.source.kind'"]),
        (_with(LOAD, 1, "load", "surplus"), ["unknown field 'load.surplus'"]),
        (_with(LOAD, "8", "load", "batch_size"), ["'load.batch_size' must be an integer", "'8'"]),
        (_with(LOAD, True, "load", "threads"), ["'load.threads' must be an integer"]),
        (_with(LOAD, None, "base"), ["'base' must be an object"]),
        (_with(LOAD, [0, "1"], "cpus"), ["'cpus[1]' must be an integer"]),
    ],
)
def test_a_malformed_job_is_refused_naming_what_is_wrong(data: Any, words: list[str]) -> None:
    with pytest.raises(JobError) as refused:
        job_from_json(data)
    for w in words:
        assert w in str(refused.value)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"kind": "exit!"}, ["unknown command kind 'exit!'", "known: arrivals, concurrent, exit"]),
        (JOB_EXAMPLES[0].to_json(), ["unknown command kind 'build'"]),
        ({"kind": "measure", "settle": 1}, ["command 'measure'", "missing field 'calls'"]),
        ({"kind": "measure", "calls": 2.5}, ["'calls' must be an integer"]),
        ({"kind": "warmup", "seconds": "1", "min_calls": 1}, ["'seconds' must be a number"]),
        ({"kind": "exit", "now": True}, ["command 'exit'", "unknown field 'now'"]),
    ],
)
def test_a_malformed_command_is_refused_naming_what_is_wrong(data: Any, words: list[str]) -> None:
    with pytest.raises(JobError) as refused:
        command_from_json(data)
    for w in words:
        assert w in str(refused.value)


# ---- a real worker process, on the fake runtime


def _raw_worker(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Connection]:
    """A worker process and our end of its socket pair, before any message."""
    parent, child = socket.socketpair()
    with open(tmp_path / "worker.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bakeoff.inference.worker", str(child.fileno())],
            pass_fds=[child.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    child.close()
    return proc, Connection(parent.detach())


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (b'{"kind": "fit", "epochs": 3}', ["unknown job kind 'fit'"]),
        (b'{"kind": "train", "epochs": 3}', ["unknown job kind 'train'", "known: build,"]),
        (b'{"kind": "load", "epochs": 3}', ["job 'load': unknown field 'epochs'"]),
        (json.dumps(_without(LOAD, "load", "variant")).encode(), ["missing field 'load.variant'"]),
        (b"not json", ["a message that is not JSON"]),
    ],
)
def test_the_worker_answers_a_job_it_cannot_read_with_an_error(
    tmp_path: Path, message: bytes, words: list[str]
) -> None:
    proc, conn = _raw_worker(tmp_path)
    try:
        conn.send_bytes(message)
        assert conn.poll(60), "the worker did not answer"
        reply = json.loads(conn.recv_bytes())
        assert reply["ok"] is False
        for w in words:
            assert w in reply["reason"]
        assert proc.wait(timeout=60) == 0  # it ended by itself, not by a crash
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        conn.close()


def _fake_load_job(tmp_path: Path) -> LoadJob:
    rng = np.random.default_rng(0)
    arrays = rng.random((12, 4), dtype=np.float32)
    data = tmp_path / "data.npz"
    np.savez(data, **{"pool/input": arrays, "quality/input": arrays})
    base = dataclasses.replace(
        _base(str(data)),
        source=ModelSource(kind="fake", factory=None, path=None, base_dir=None),
        artifacts_dir=str(tmp_path / "artifacts"),
    )
    spec = LoadSpec(variant=Variant("fake", "fp32"), artifact={}, batch_size=4, threads=1)
    cpu = min(os.sched_getaffinity(0))  # pinned to one of the CPUs this test may use
    return LoadJob(base=base, load=spec, outputs_path=str(tmp_path / "outputs.npy"), cpus=(cpu,))


def test_a_loaded_worker_answers_a_bad_command_and_goes_on(tmp_path: Path) -> None:
    job = _fake_load_job(tmp_path)
    worker = WorkerProcess(job, 1, tmp_path / "worker.log")
    try:
        ready = worker.reply(60)
        assert ready["event"] == "ready"
        assert job.cpus is not None and os.sched_getaffinity(worker.proc.pid) == set(job.cpus)
        assert np.load(job.outputs_path).shape == (12, 4)  # the quality outputs
        for bad in (b'{"kind": "train"}', b'{"kind": "measure"}', b"[1"):
            worker.conn.send_bytes(bad)
            with pytest.raises(WorkerFailed):
                worker.reply(60)
        worker.conn.send_bytes(b"\xff")
        with pytest.raises(WorkerFailed, match="not JSON"):
            worker.reply(60)
        worker.conn.send_bytes(b'{"kind": "measure", "calls": "3"}')
        with pytest.raises(WorkerFailed, match="'calls' must be an integer"):
            worker.reply(60)
        # a command of another kind's worker: refused by name, with what it answers
        with pytest.raises(WorkerFailed, match=r"unknown command kind 'concurrent' \(known: "):
            worker.request(Concurrent(concurrency=2), 60)
        warm = worker.request(Warmup(seconds=0.0, min_calls=3), 60)
        assert len(warm["latency_ns"]) == 3
        timed = worker.measure(Measure(calls=5, settle=1), 60)
        assert len(timed.latency_ns) == 5 and all(ns > 0 for ns in timed.latency_ns)
        assert timed.block_ns >= sum(timed.latency_ns)  # the fake's virtual clock
        assert worker.request(Exit(), 60)["peak_rss_mb"] > 0
        assert worker.proc.wait(timeout=60) == 0
    finally:
        worker.close()


def test_the_warm_up_counts_the_calls_made_at_its_batch_size_just_before(tmp_path: Path) -> None:
    """After a Rebatch, its first call counts toward the warm-up's calls, and at the
    batch size of the quality pass (4 here: 12 samples, 3 calls) so do those."""
    job = _fake_load_job(tmp_path)
    worker = WorkerProcess(job, 1, tmp_path / "worker.log")
    try:
        assert worker.reply(60)["worker"]["quality_batch_size"] == 4
        warm = Warmup(seconds=0.0, min_calls=3)
        assert len(worker.request(warm, 60)["latency_ns"]) == 3  # nothing counted yet
        out = str(tmp_path / "b2.npy")
        worker.request(Rebatch(batch_size=2, outputs_path=out), 60)
        assert len(worker.request(warm, 60)["latency_ns"]) == 2  # the first call is one
        worker.request(Rebatch(batch_size=4, outputs_path=out), 60)
        # 1 + 3 calls at batch 4 already: one of its own, never none
        assert len(worker.request(warm, 60)["latency_ns"]) == 1
        assert worker.request(Exit(), 60)["peak_rss_mb"] > 0
    finally:
        worker.close()


def test_peak_memory_restarts_so_a_larger_batch_is_not_charged_to_a_smaller() -> None:
    from bakeoff.trials.memory import PeakMemory

    memory = PeakMemory()
    memory.restart()  # this process's earlier peaks (other tests) are not the load's
    if not memory.restarts:  # the kernel would not restart the peak (VmHWM) here
        assert memory.scope().startswith("the whole process")
        return
    memory.loaded()
    loaded = memory.load_kib / 1024  # what the load took (a later reading may be higher)
    big = bytearray(200 * 2**20)  # 200 MiB touched: a larger batch's buffers
    big[::4096] = b"x" * len(big[::4096])
    assert memory.mb() >= loaded + 150
    del big
    memory.restart()
    assert loaded <= memory.mb() < loaded + 150  # the load's peak stays charged
    assert memory.scope().startswith("load and first call")


def test_a_job_with_its_own_python_runs_its_worker_under_that_interpreter(
    tmp_path: Path,
) -> None:
    """A runtime in an environment of its own (bakeoff.runtime_envs): the launcher
    starts its worker with the job's interpreter, on the same protocol."""
    marker = tmp_path / "ran-under-wrapper"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\necho "$@" > {marker}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    job = dataclasses.replace(_fake_load_job(tmp_path), python=str(wrapper))
    worker = WorkerProcess(job, 1, tmp_path / "worker.log")
    try:
        assert worker.reply(60)["event"] == "ready"
        assert worker.request(Exit(), 60)["peak_rss_mb"] > 0
    finally:
        worker.close()
    assert marker.read_text().startswith(f"-m {job.worker} ")
