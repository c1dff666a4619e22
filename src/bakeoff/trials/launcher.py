"""Starting workers and talking to them, from the orchestrator's side.

The trial engine sees a `Launcher` (`start(job, log) -> Worker`) and the
`Worker` it returns; `LocalLauncher` starts local processes. A cluster launcher
(Ray) is another implementation of the same two protocols.

Waiting is always a blocking wait on the socket (select under the hood, with
the trial timeout), never a polling loop: on a 2-core machine a spinning parent
would steal half the machine from the worker it measures.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from bakeoff.trials.jobs import Command, Job, JobError, Measure, Timed

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
)


class WorkerFailed(Exception):
    """The worker crashed, hung, or reported an error; the message says which."""

    def __init__(self, reason: str, not_needed: bool = False) -> None:
        super().__init__(reason)
        self.not_needed = not_needed  # a build that would add nothing, not an error


def worker_env(threads: int) -> dict[str, str]:
    """The same explicit thread settings for every runtime (docs/method.md rule 2)."""
    env = dict(os.environ)
    for name in THREAD_VARIABLES:
        env[name] = str(threads)
    env["TF_NUM_INTEROP_THREADS"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "worker stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"worker killed by signal {name} ({-returncode})"
    return f"worker exited with code {returncode}"


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    tail = [line.strip() for line in text[-lines:] if line.strip()]
    return "; last output: " + " | ".join(tail) if tail else ""


# Jobs whose worker times a load and a first call (`Job.timed_load`) get on-disk compile caches of
# their own, empty: torch.compile's first call then includes the compile that a
# fresh deployment pays, and repeated cold starts are independent. With the
# shared default cache (/tmp/torchinductor_$USER) a digits run's first process
# compiled in 18.6 s and the next two took 2.9 s and 3.0 s, from its kernels,
# and a rerun of the same workload reported the cached figure as its cold start.
# The worker removes the folder named in PRIVATE_CACHE_VARIABLE when it ends, as
# the orchestrator does when it closes the worker: if the orchestrator is killed,
# its workers see the socket close and exit, and nothing is left in /tmp.
COMPILE_CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
PRIVATE_CACHE_VARIABLE = "BAKEOFF_WORKER_COMPILE_CACHE"


class WorkerProcess:
    """One worker process with a JSON message channel: a typed job, then commands.

    `seed_cache`: a compile cache folder whose contents the worker's own (empty)
    one starts from (`reuse_compiles`)."""

    def __init__(
        self, job: Job, threads: int, log_path: Path, seed_cache: Path | None = None
    ) -> None:
        parent_sock, child_sock = socket.socketpair()
        self.log_path = log_path
        # A run that stops (its reference failed) closes every worker while the thread
        # that loaded one may close it too: one of them closes it, once. Two closes of
        # the channel's descriptor race (EBADF, or a descriptor reused meanwhile).
        self._close_lock = threading.Lock()
        self._closed = False
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = worker_env(threads)
        self.compile_cache: Path | None = None
        if job.timed_load:
            self.compile_cache = Path(tempfile.mkdtemp(prefix="bakeoff-compile-cache-"))
            if seed_cache is not None:
                # A kernel it cannot copy is compiled again, as from empty.
                with contextlib.suppress(OSError):
                    shutil.copytree(seed_cache, self.compile_cache, dirs_exist_ok=True)
            for name in COMPILE_CACHE_VARIABLES:
                env[name] = str(self.compile_cache / name.lower())
            env[PRIVATE_CACHE_VARIABLE] = str(self.compile_cache)
        # Ctrl-C in a terminal reaches the whole process group, workers too; the
        # orchestrator stops them itself. The worker starts with SIGINT blocked (a
        # signal mask survives exec) and ignores it before unblocking, so a Ctrl-C
        # during its imports is dropped, not a KeyboardInterrupt in its log.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            with open(log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [job.python or sys.executable, "-m", job.worker, str(child_sock.fileno())],
                    pass_fds=[child_sock.fileno()],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self._send(job.to_json())

    def _send(self, msg: dict[str, Any]) -> None:
        try:
            self.conn.send_bytes(json.dumps(msg).encode())
        except OSError:
            raise WorkerFailed(self._death()) from None

    def _death(self) -> str:
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.returncode
        return describe_exit(rc) + _log_tail(self.log_path)

    def reply(self, timeout: float) -> dict[str, Any]:
        """Block until the worker answers, dies, or `timeout` seconds pass."""
        if not self.conn.poll(timeout):
            self.kill()
            raise WorkerFailed(f"exceeded the trial timeout of {timeout:g} s (worker killed)")
        try:
            data = self.conn.recv_bytes()
        except (EOFError, OSError):
            raise WorkerFailed(self._death()) from None
        msg = dict(json.loads(data))
        if not msg.get("ok"):
            raise WorkerFailed(
                str(msg.get("reason", "worker reported an error")),
                not_needed=bool(msg.get("not_needed")),
            )
        return msg

    def request(self, cmd: Command, timeout: float) -> dict[str, Any]:
        self._send(cmd.to_json())
        return self.reply(timeout)

    def measure(self, cmd: Measure, timeout: float) -> Timed:
        """One timed block: its calls' ns and the whole block's."""
        reply = self.request(cmd, timeout)
        try:
            return Timed.from_json(reply)
        except JobError as exc:
            raise WorkerFailed(f"the worker's reply to measure: {exc}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self.kill()
        self.conn.close()
        if self.compile_cache is not None:
            shutil.rmtree(self.compile_cache, ignore_errors=True)


def run_job(job: Job, threads: int, log_path: Path, timeout: float) -> dict[str, Any]:
    """A one-shot job (build, reference) in its own process."""
    worker = WorkerProcess(job, threads, log_path)
    try:
        return worker.reply(timeout)
    finally:
        worker.close()


class Worker(Protocol):
    """A started worker as the trial engine talks to it: each call blocks until the
    worker answers, fails, or the timeout passes (then it raises WorkerFailed)."""

    def reply(self, timeout: float) -> dict[str, Any]: ...

    def request(self, cmd: Command, timeout: float) -> dict[str, Any]: ...

    def measure(self, cmd: Measure, timeout: float) -> Timed: ...

    def close(self) -> None: ...


class Launcher(Protocol):
    """Where workers run: `start` one for a job (it answers the job first, then
    commands), or `run` a one-shot job to its single reply. `name` names the
    worker's log."""

    def start(self, job: Job, name: str) -> Worker: ...

    def run(self, job: Job, name: str, timeout: float) -> dict[str, Any]: ...


class LocalLauncher:
    """Workers as processes on this machine, with the job's threads (docs/method.md
    rule 2) in their environment and their output in `logs/<name>.log`."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        # Each candidate build's first measuring worker, whose compile caches a
        # further process of a close call starts from (`reuse_compiles`).
        self._first: dict[str, WorkerProcess] = {}
        self._lock = threading.Lock()  # workers may start side by side

    def start(self, job: Job, name: str) -> WorkerProcess:
        key = job.compiles_of()
        if key is None:
            return WorkerProcess(job, job.threads, self.logs / f"{name}.log")
        with self._lock:
            first = self._first.get(key)
        seed = first.compile_cache if first is not None and job.reuse_compiles else None
        if seed is not None and not seed.is_dir():
            seed = None  # that worker has ended: its caches went with it
        worker = WorkerProcess(job, job.threads, self.logs / f"{name}.log", seed)
        with self._lock:
            if first is None or first.compile_cache is None or not first.compile_cache.is_dir():
                self._first[key] = worker
        return worker

    def run(self, job: Job, name: str, timeout: float) -> dict[str, Any]:
        return run_job(job, job.threads, self.logs / f"{name}.log", timeout)
