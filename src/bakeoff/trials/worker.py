"""The loop every worker process runs, whatever its kind of bake-off.

A kind's worker module (`inference.worker`, `training.worker`,
`generation.worker`) is run as ``python -m <module> FD``: FD is one end of a
socket pair. Messages both ways are JSON (never pickle). The parent sets thread
variables in the environment before this process starts, so they hold before
numpy or any runtime is imported.

The first message is a job, the ones after it commands: the typed messages of
`bakeoff.trials.jobs` and of the kind's own `messages`, which say what each one
asks. A message this worker cannot read is answered with an error that names
what is wrong; after a bad command the worker goes on answering commands.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from bakeoff.transforms import StepFailed, StepNotNeeded
from bakeoff.trials.jobs import Command, Exit, Job, JobError, by_kind, message_from_json
from bakeoff.trials.launcher import PRIVATE_CACHE_VARIABLE

# What a started worker does with each command it answers, by the command's class.
Handlers = Mapping[type[Command], Callable[[Any], dict[str, Any]]]


def send(conn: Connection, msg: dict[str, Any]) -> None:
    conn.send_bytes(json.dumps(msg).encode())


def recv(conn: Connection) -> Any:
    """The next message, parsed but not yet checked (`bakeoff.trials.jobs` does)."""
    data = conn.recv_bytes()
    try:
        return json.loads(data)
    except ValueError as exc:  # not JSON, or not UTF-8
        raise JobError(f"a message that is not JSON ({exc})") from None


def answer_until_exit(conn: Connection, handlers: Handlers) -> None:
    """Commands, each answered in turn by its handler, until `Exit`. A command the
    worker has no handler for is refused by name, as a message it cannot read is."""
    known = by_kind(handlers)
    while True:
        try:
            cmd = message_from_json(known, recv(conn))
            reply = handlers[type(cmd)](cmd)
        except JobError as exc:  # not JSON, not a command, or one refused: say so, go on
            send(conn, {"ok": False, "reason": str(exc)})
            continue
        send(conn, {"ok": True, **reply})
        if isinstance(cmd, Exit):
            return


def serve(
    fd: int, jobs: Mapping[str, type[Job]], run: Callable[[Connection, Any, float], None]
) -> int:
    """Read the job (one of `jobs`), pin the process as it says, and `run` it: `run`
    sends the replies (a one-shot job's single reply, or "ready" and then the answers
    to commands). Whatever goes wrong is one error reply, never a traceback on the
    channel; the traceback goes to the job's log. Returns the process's exit status."""
    started = time.perf_counter()
    # Started with SIGINT blocked (see WorkerProcess): the orchestrator, not Ctrl-C,
    # stops a worker, so a pending or later SIGINT is dropped.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    conn = Connection(fd)
    try:
        try:
            job = message_from_json(dict(jobs), recv(conn))
        except JobError as exc:  # not JSON, or not a job: say so instead of a traceback
            send(conn, {"ok": False, "reason": str(exc)})
            return 0
        if job.cpus:
            os.sched_setaffinity(0, job.cpus)
        if job.compile_threads:  # read when torch._inductor is first imported
            os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(job.compile_threads)
        run(conn, job, started)
    except StepNotNeeded as exc:
        send(conn, {"ok": False, "reason": str(exc), "not_needed": True})
    except StepFailed as exc:
        send(conn, {"ok": False, "reason": str(exc)})
    except Exception as exc:
        traceback.print_exc()  # into the job's log file
        send(conn, {"ok": False, "reason": f"{type(exc).__name__}: {exc}"})
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if private_cache := os.environ.get(PRIVATE_CACHE_VARIABLE):
            shutil.rmtree(private_cache, ignore_errors=True)
    return 0
