"""llama.cpp's own server (`llama-server`): the llama-cpp engine's scheduler in the
server scenario, and what `bakeoff serve` starts for a llama-cpp winner.

Its slots (`--parallel`) decode every running request in one batch and take in an
arriving request as soon as a slot is free (continuous batching), which
llama-cpp-python's `Llama` does not do: it decodes one sequence at a time. bakeoff
ships no binary: `make llama-server` builds `llama-server` from the llama.cpp that
llama-cpp-python 0.3.36 vendors (the sources its binding was compiled from) into the
venv's `bin/`; `BAKEOFF_LLAMA_SERVER` names another build.

Requests go to its OpenAI-compatible completions endpoint through bakeoff's own client
(`generators.openai_endpoint`) as token ids, greedy (temperature 0, top-k 1), with its
prompt cache off: the scenario repeats the workload's prompts, and a cached prefix
would time a prefill that never ran. The server is a process of its own beside the
worker, its memory not in the worker's `peak_rss_mb`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from bakeoff.generators.arrivals import Arrival, Served

ENV = "BAKEOFF_LLAMA_SERVER"
INSTALL = "make llama-server (builds llama.cpp's server: about 7 minutes on 2 cores)"
# Requests decoded together (`--parallel`): a stated default, recorded with the
# candidate; each slot has the model's whole context.
SLOTS = 8
READY_S = 120.0  # loading a GGUF file and warming up
# What every request asks beyond the prompt: llama.cpp's greedy sampler, no cache.
GREEDY = {"temperature": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0, "cache_prompt": False}


def binary() -> Path | None:
    """The llama-server to run: `BAKEOFF_LLAMA_SERVER`, else the venv's, else one on
    PATH; None where there is none."""
    given = os.environ.get(ENV)
    if given:
        return Path(given) if Path(given).is_file() else None
    beside = Path(sys.prefix) / "bin" / "llama-server"
    if beside.is_file():
        return beside
    found = shutil.which("llama-server")
    return Path(found) if found else None


def version(server: Path) -> str | None:
    """What `llama-server --version` says of its build ("0.5.0-dev (build 1, commit
    0c1e570)"); None where it does not run."""
    try:
        said = subprocess.run(
            [str(server), "--version"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return None
    for line in (said.stdout + said.stderr).splitlines():
        if line.startswith("version:"):
            return line.removeprefix("version:").strip()
    return None


def describe() -> str:
    """For `bakeoff env`: the llama-server the llama-cpp runtime serves through, or
    how to build it."""
    server = binary()
    if server is None:
        return f"llama-server (the server scenario's slots, bakeoff serve): not built: {INSTALL}"
    return f"llama-server {version(server) or '(its version unreadable)'} at {server}"


def command(
    server: Path, gguf: Path, host: str, port: int, threads: int, context: int, slots: int = SLOTS
) -> list[str]:
    """llama-server's command line: `slots` requests at once, each with `context`
    positions, on `threads` threads."""
    return [
        str(server), "--model", str(gguf), "--host", host, "--port", str(port),
        "--parallel", str(slots), "--ctx-size", str(context * slots),
        "--threads", str(threads), "--threads-batch", str(threads), "--seed", "0",
    ]  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the server's process, before it runs llama-server: SIGTERM when the worker
    that started it dies (Linux's PR_SET_PDEATHSIG), so a worker killed by its
    timeout leaves no server behind it."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


class LlamaServer:
    """A running llama-server on loopback for one GGUF file, stopped by `close`
    (and when the process exits)."""

    def __init__(
        self, server: Path, gguf: Path, threads: int, context: int, log_path: Path
    ) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.command = command(server, gguf, "127.0.0.1", self.port, threads, context)
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 (closed in close)
        self.proc = subprocess.Popen(
            self.command, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )
        atexit.register(self.close)
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        ends = time.monotonic() + READY_S
        while time.monotonic() < ends:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited with code {self.proc.returncode} while loading "
                    f"({self._tail()})"
                )
            with (
                contextlib.suppress(urllib.error.URLError, OSError),
                urllib.request.urlopen(self.url + "/health", timeout=2) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"llama-server was not ready after {READY_S:.0f} s ({self._tail()})")

    def _tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return "last output: " + " | ".join(line.strip() for line in lines[-3:])

    def send(self, schedule: Sequence[Arrival], max_new_tokens: int) -> list[Served]:
        """`schedule` through the server's slots; a request it failed fails the call."""
        from bakeoff.generators import openai_endpoint

        requests: list[tuple[int, str | list[int]]] = [(a.at_ns, list(a.prompt)) for a in schedule]
        # A connection per request: with kept connections, a request the client put on
        # one the server had just closed failed ("Can not write request body", about 1
        # in 24 requests, seen here on every llama-cpp candidate).
        served, stamps = openai_endpoint.send(
            self.url, "model", requests, max_new_tokens, extra=GREEDY, keep_alive=False
        )
        failed = [s.error for s in stamps if s.error]
        if failed:
            raise RuntimeError(
                f"llama-server failed {len(failed)} of {len(stamps)} requests: {failed[0]}"
            )
        return served

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        atexit.unregister(self.close)


def settings(server: Path, threads: int, context: int) -> dict[str, Any]:
    """What the candidate records of the server path (where llama-server is there)."""
    return {
        "binary": str(server),
        "version": version(server),
        "slots": SLOTS,
        "context_per_slot": context,
        "threads": threads,
        "prompt_cache": False,
    }
