"""Multi-process training stacks: ranks under torchrun, driven from the worker.

The worker the trial engine started (`bakeoff.training.worker`) stays the engine's
one worker: it starts torchrun with this module as the entry script (never by
re-running `sys.argv`), and every rank connects back to it on a loopback socket.
Each command goes to every rank, and each rank answers it; the ranks meet only
inside the steps themselves (DDP's all-reduce), so an idle rank waits on its own
socket and the process group's timeout (far below torch's default of 30 minutes)
bounds only a collective that hangs.

A rank draws the seed's data order itself, as every stack does, and takes its
share of each global batch; the steps of a command are timed inside rank 0, so
no message passes inside the clock. If the worker goes, every rank sees its
socket close and exits; torchrun then stops and the worker's log has their output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bakeoff.stacks import drivers
from bakeoff.stacks.spec import TrainSpec
from bakeoff.stacks.steps import Steps
from bakeoff.trials.launcher import PRIVATE_CACHE_VARIABLE
from bakeoff.trials.memory import PeakMemory

SPEC_VARIABLE = "BAKEOFF_RANK_SPEC"
CONTROL_VARIABLE = "BAKEOFF_RANK_CONTROL"
TOKEN_VARIABLE = "BAKEOFF_RANK_TOKEN"
# The process group's timeout: a collective that waits this long has a rank that
# hung or died (torch's default, 30 minutes, would hold the run that long).
GROUP_TIMEOUT_S = 120.0
# How long the ranks may take to start, import torch and build the model.
START_TIMEOUT_S = 300.0


class RankError(RuntimeError):
    pass


class RankGroup:
    """The ranks of one multi-process stack, as the worker drives them: the same
    calls a single-process stack answers in the worker itself (`LocalDriver`)."""

    def __init__(self, spec: TrainSpec) -> None:
        self.processes = spec.processes
        # Only our ranks may take a rank's place: any process that reaches the port
        # can connect, so each rank proves itself with the token it was given.
        self.token = secrets.token_hex(16)
        listener = socket.create_server((self.control_host(), 0))
        self.conns: list[Connection] = []
        try:
            self.launch(spec, listener.getsockname()[1])
            self.conns = self._accept(listener)
            readies = self._gather()
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()
        self.rows = int(readies[0]["rows"])
        self.settings: dict[str, Any] = {**readies[0]["settings"], "processes": self.processes}
        self.ready(readies)
        # rank 0's gradient communication in flight, as its replies said (None: the
        # stack's is not timed)
        self.comm_ns: int | None = 0

    # How the ranks start and end: here, torchrun on this machine. A group of ranks
    # elsewhere (`bakeoff.distributed.nodes`) says so in these hooks.

    def control_host(self) -> str:
        """The address the ranks connect back to."""
        return "127.0.0.1"

    def launch(self, spec: TrainSpec, port: int) -> None:
        per_rank = max(1, spec.threads // spec.processes)
        env = dict(os.environ)
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[name] = str(per_rank)
        env.update(
            {
                SPEC_VARIABLE: json.dumps(
                    dataclasses.asdict(dataclasses.replace(spec, threads=per_rank))
                ),
                CONTROL_VARIABLE: str(port),
                TOKEN_VARIABLE: self.token,
                "MASTER_ADDR": "127.0.0.1",
                "GLOO_SOCKET_IFNAME": "lo",
            }
        )
        # --standalone: a rendezvous on a free local port; the ranks' output goes to
        # the worker's log, as the worker's own does. torchrun's own files go into the
        # worker's private folder (removed when it ends), not into /tmp.
        private = os.environ.get(PRIVATE_CACHE_VARIABLE)
        log_dir = [f"--log-dir={Path(private) / 'torchrun'}"] if private else []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={spec.processes}",
                *log_dir,
                "--module",
                "bakeoff.distributed.ranks",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
        )

    def ended(self, wait_s: float = 0.0) -> str | None:
        """How the ranks' launcher ended (waiting up to `wait_s`), or None: not yet."""
        try:
            code = self.proc.wait(timeout=wait_s) if wait_s else self.proc.poll()
        except subprocess.TimeoutExpired:
            return None
        return None if code is None else f"torchrun exited with code {code}"

    def stop(self) -> None:
        """After the ranks were told to exit: wait for them, kill what stays."""
        if not hasattr(self, "proc"):  # torchrun did not start
            return
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def ready(self, readies: list[dict[str, Any]]) -> None:
        """What the group adds to its settings once every rank is up (under torchrun,
        nothing: the stack's own settings name its launcher)."""

    def failure(self, words: str) -> str:
        """What the worker's error says of a rank's failure (here, the ranks' own)."""
        return words

    def _accept(self, listener: socket.socket) -> list[Connection]:
        by_rank: dict[int, Connection] = {}
        deadline = time.monotonic() + START_TIMEOUT_S
        listener.settimeout(1.0)
        while len(by_rank) < self.processes:
            ended = self.ended()
            if ended is not None:
                raise RankError(self.failure(f"{ended} before every rank started"))
            if time.monotonic() > deadline:
                raise RankError(
                    self.failure(f"the ranks did not start within {START_TIMEOUT_S:g} s")
                )
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            sock.setblocking(True)
            conn = Connection(sock.detach())
            hello: dict[str, Any] = {}
            try:
                # A peer that says nothing, or too much, is dropped, not waited for.
                if conn.poll(10.0):
                    said = json.loads(conn.recv_bytes(4096))
                    hello = said if isinstance(said, dict) else {}
            except (OSError, EOFError, ValueError):
                pass
            rank = hello.get("rank") if hello.get("token") == self.token else None
            if not isinstance(rank, int) or rank not in range(self.processes):
                conn.close()
                continue
            by_rank[rank] = conn
        return [by_rank[r] for r in range(self.processes)]

    def _gather(self) -> list[dict[str, Any]]:
        """Every rank's reply; where one failed, the error a rank reported (a rank
        that raised takes the others down with it, so theirs may be only a closed
        socket)."""
        replies: list[dict[str, Any] | None] = []
        for conn in self.conns:
            try:
                replies.append(json.loads(conn.recv_bytes()))
            except (EOFError, OSError):
                replies.append(None)
        reasons = [
            f"rank {rank}: {r.get('reason')}"
            for rank, r in enumerate(replies)
            if r is not None and not r.get("ok")
        ]
        if reasons:
            raise RankError(self.failure("; ".join(reasons)))
        if any(r is None for r in replies):
            gone = [str(rank) for rank, r in enumerate(replies) if r is None]
            ended = self.ended(wait_s=30) or "the ranks' launcher has not ended yet"
            raise RankError(self.failure(f"rank {', '.join(gone)} stopped ({ended})"))
        return [r for r in replies if r is not None]

    def _all(self, op: str, **args: Any) -> list[dict[str, Any]]:
        message = json.dumps({"op": op, **args}).encode()
        for conn in self.conns:
            conn.send_bytes(message)
        return self._gather()

    def steps(self, n: int) -> Steps:
        """`n` steps on every rank, timed in rank 0; each step's loss is the mean of
        the ranks' (their shares are equal), the loss of the whole global batch."""
        replies = self._all("steps", n=n)
        first = Steps(**replies[0]["steps"])
        losses = [
            sum(r["steps"]["losses"][i] for r in replies) / len(replies)
            for i in range(len(first.losses))
        ]
        comm = replies[0]["comm_ns"]
        self.comm_ns = None if comm is None else int(comm)
        return dataclasses.replace(first, losses=losses)

    def initial_loss(self) -> float:
        replies = self._all("initial_loss")
        return sum(float(r["loss"]) for r in replies) / len(replies)

    def evaluate(self) -> float:
        return float(self._all("evaluate")[0]["metric"])

    def checkpoint(self, path: str) -> dict[str, Any]:
        replies = self._all("checkpoint", path=path)
        found = dict(replies[0]["checkpoint"])
        found["reload_identical"] = all(r["checkpoint"]["reload_identical"] for r in replies)
        return found

    def peak_mb(self) -> list[float]:
        return [float(r["peak_rss_mb"]) for r in self._all("peak")]

    def communication_ns(self) -> int | None:
        return self.comm_ns

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):  # a rank that is gone already
                conn.send_bytes(json.dumps({"op": "exit"}).encode())
        self.stop()
        for conn in self.conns:
            conn.close()


def _rank_main() -> int:
    """One rank, as torchrun starts it: connect to the worker, build the stack's
    trainer inside the process group, then answer the worker's commands."""
    import torch.distributed as dist

    spec = TrainSpec(**json.loads(os.environ[SPEC_VARIABLE]))
    conn = connect_back(
        "127.0.0.1", int(os.environ[CONTROL_VARIABLE]), int(os.environ["RANK"]),
        os.environ[TOKEN_VARIABLE],
    )  # fmt: skip

    def group() -> None:
        dist.init_process_group("gloo", timeout=timedelta(seconds=GROUP_TIMEOUT_S))

    return serve(conn, spec, group)


def connect_back(host: str, port: int, rank: int, token: str) -> Connection:
    """The rank's control connection to the worker, its token said first."""
    sock = socket.create_connection((host, port))
    conn = Connection(sock.detach())
    conn.send_bytes(json.dumps({"rank": rank, "token": token}).encode())
    return conn


def serve(
    conn: Connection,
    spec: TrainSpec,
    setup: Callable[[], None] = lambda: None,
    facts: dict[str, Any] | None = None,
    checkpoint_dir: str | None = None,
) -> int:
    """A rank's life once connected: `setup` (the process group, where the launcher
    did not start it), the stack's driver, the ready message (with `facts` of the
    rank's own), then the worker's commands until it says exit or goes. With
    `checkpoint_dir`, the checkpoint check writes there (the rank's own folder on
    its node), under the name the worker gave."""
    import torch.distributed as dist

    try:
        setup()
        driver = drivers.driver(spec, in_ranks=True)
        memory = PeakMemory()
    except Exception as exc:
        conn.send_bytes(
            json.dumps({"ok": False, "reason": f"{type(exc).__name__}: {exc}"}).encode()
        )
        raise
    ready = {"ok": True, "rows": driver.rows, "settings": driver.settings, **(facts or {})}
    conn.send_bytes(json.dumps(ready).encode())
    while True:
        try:
            cmd = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return 1  # the worker is gone
        op = cmd["op"]
        if op == "exit":
            break
        try:
            match op:
                case "steps":
                    steps = driver.steps(int(cmd["n"]))
                    reply = {
                        "steps": dataclasses.asdict(steps),
                        "comm_ns": driver.communication_ns(),
                    }
                case "initial_loss":
                    reply = {"loss": driver.initial_loss()}
                case "evaluate":
                    reply = {"metric": driver.evaluate()}
                case "checkpoint":
                    path = str(cmd["path"])
                    if checkpoint_dir is not None:
                        path = str(Path(checkpoint_dir) / Path(path).name)
                    reply = {"checkpoint": driver.checkpoint(path)}
                case "peak":
                    reply = {"peak_rss_mb": memory.mb()}
                case _:
                    raise RankError(f"no rank command {op!r}")
        except Exception as exc:
            conn.send_bytes(
                json.dumps({"ok": False, "reason": f"{type(exc).__name__}: {exc}"}).encode()
            )
            raise
        conn.send_bytes(json.dumps({"ok": True, **reply}).encode())
    driver.close()
    if dist.is_initialized():  # a framework's teardown may have ended it already
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(_rank_main())
