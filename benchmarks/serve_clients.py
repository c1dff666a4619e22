"""The clients and servers `serve_overhead.py` measures with: a load generator, an
interleaved one-request-at-a-time comparison with the runtime in-process, a
`bakeoff serve` subprocess, and the in-process loop.

The load generator is a plain asyncio HTTP/1.1 keep-alive client (one connection
per simulated user, Triton's binary tensor format, so neither side parses JSON
arrays): an httpx client spends more CPU per request than the server overhead
being measured. Its CPU time is counted, since client and server share the
machine's cores.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import uvloop

from bakeoff import export


@dataclass
class Level:
    concurrency: int
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]
    client_cpu_s: float

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds

    def pct(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")


def infer_request(host: str, model: str, inputs: dict[str, np.ndarray], output: str) -> bytes:
    """A whole HTTP/1.1 infer request in Triton's binary format (JSON header, then raw
    tensors), built once: the clients only send it."""
    header = {
        "inputs": [
            {
                "name": name,
                "shape": list(a.shape),
                "datatype": {"int64": "INT64", "float32": "FP32", "int32": "INT32"}[str(a.dtype)],
                "parameters": {"binary_data_size": a.nbytes},
            }
            for name, a in inputs.items()
        ],
        "outputs": [{"name": output, "parameters": {"binary_data": True}}],
    }
    head = json.dumps(header).encode()
    body = head + b"".join(np.ascontiguousarray(a).tobytes() for a in inputs.values())
    return (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Length: {len(body)}\r\nInference-Header-Content-Length: {len(head)}\r\n\r\n"
    ).encode() + body


class Connection:
    """One keep-alive HTTP/1.1 connection that sends binary infer requests."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        self.writer.close()

    async def call(self, request: bytes) -> tuple[bool, float]:
        """(answered 200, milliseconds from sending to the whole answer read)."""
        t0 = time.perf_counter()
        self.writer.write(request)
        status_line = await self.reader.readline()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return b" 200 " in status_line, (time.perf_counter() - t0) * 1000


async def _user(
    connection: Connection,
    requests: list[bytes],
    deadline: float,
    latencies: list[float],
    errors: list[int],
) -> None:
    await connection.open()
    i = 0
    try:
        while time.perf_counter() < deadline:
            ok, ms = await connection.call(requests[i % len(requests)])
            i += 1
            latencies.append(ms)
            if not ok:
                errors.append(1)
    finally:
        connection.close()


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def load(url: str, requests: list[bytes], concurrency: int, seconds: float) -> Level:
    latencies: list[float] = []
    errors: list[int] = []

    async def run() -> float:
        deadline = time.perf_counter() + seconds
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                _user(Connection(*address(url)), requests, deadline, latencies, errors)
                for _ in range(concurrency)
            )
        )
        return time.perf_counter() - t0

    cpu0 = time.process_time()
    # uvloop, as the server uses: the client's own cost is not the server's overhead
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        wall = runner.run(run())
    return Level(
        concurrency, len(latencies), len(errors), wall, latencies, time.process_time() - cpu0
    )


@dataclass
class Interleaved:
    served_ms: list[float]
    local_ms: list[float]
    pair_differences_ms: list[float]  # per pair of blocks: served median - in-process median
    dropped_ms: tuple[list[float], list[float]]  # the blocks' first calls: served, in-process

    @property
    def added_p50(self) -> float:
        return statistics.median(self.served_ms) - statistics.median(self.local_ms)


def interleaved(
    url: str,
    requests: list[bytes],
    predict: export.Predictor,
    singles: list[dict[str, np.ndarray]],
    pairs: int,
    per_block: int,
) -> Interleaved:
    """Latency at one request at a time, through the server and in-process, in
    alternating blocks of `per_block` calls (the server first in one pair, in-process
    first in the next), so that the machine's drift over seconds hits both alike.
    Each block's first call is dropped: it follows the other side's calls, whose
    runtime threads may still be spinning (OpenVINO's keep a core busy for about a
    millisecond after a call) and would slow it.

    The client here is a blocking socket, the cheapest there is: with one request
    at a time there is nothing for an event loop to interleave, and its own Python
    work per request would count as the server's."""
    sock = socket.create_connection(address(url))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    stream = sock.makefile("rb")
    calls = 0
    served: list[float] = []
    local: list[float] = []
    differences: list[float] = []
    dropped_served: list[float] = []
    dropped_local: list[float] = []

    def served_call(i: int) -> float:
        t0 = time.perf_counter()
        sock.sendall(requests[i % len(requests)])
        status_line = stream.readline()
        length = 0
        while (line := stream.readline()) not in (b"\r\n", b""):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        stream.read(length)
        ms = (time.perf_counter() - t0) * 1000
        if b" 200 " not in status_line:
            raise SystemExit(f"the server answered an infer request with {status_line!r}")
        return ms

    def local_call(i: int) -> float:
        single = singles[i % len(singles)]
        t0 = time.perf_counter()
        predict(single)
        return (time.perf_counter() - t0) * 1000

    def block(call: Callable[[int], float], dropped: list[float]) -> list[float]:
        nonlocal calls
        out = [call(calls + i) for i in range(per_block)]
        calls += per_block
        dropped.append(out[0])
        return out[1:]

    try:
        for pair in range(pairs):
            if pair % 2:
                here = block(local_call, dropped_local)
                there = block(served_call, dropped_served)
            else:
                there = block(served_call, dropped_served)
                here = block(local_call, dropped_local)
            served.extend(there)
            local.extend(here)
            differences.append(statistics.median(there) - statistics.median(here))
    finally:
        stream.close()
        sock.close()
    return Interleaved(served, local, differences, (dropped_served, dropped_local))


class Server:
    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bakeoff.cli", "serve", *args, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.url = ""
        listening, ready = threading.Event(), threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line.rstrip())
                m = re.search(r"listening on (http://[\d.]+:\d+)", line)
                if m:
                    self.url = m.group(1)
                    listening.set()
                if line.startswith(("ready:", "error:")):  # may come before listening
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not (ready.wait(300) and listening.wait(30)):
            self.proc.kill()
            raise SystemExit("the server did not become ready:\n" + "\n".join(self.lines))

    def metrics(self) -> str:
        import httpx

        return httpx.get(f"{self.url}/metrics").text

    @property
    def ready_line(self) -> str:
        return next(line for line in self.lines if line.startswith("ready:"))

    @property
    def max_batch(self) -> int:
        return int(re.search(r"batches of up to (\d+)", self.ready_line).group(1))  # type: ignore[union-attr]

    @property
    def delay_ms(self) -> float:
        return float(re.search(r"([\d.]+) ms delay", self.ready_line).group(1))  # type: ignore[union-attr]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


ROWS, EXECUTIONS = "bakeoff_inference_rows_total", "bakeoff_executions_total"
BLOCK = 10  # calls in a block at concurrency 1, the first of them dropped
COMPUTE_SUM = "bakeoff_compute_duration_seconds_sum"


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def in_process(
    predict: export.Predictor, pool: dict[str, np.ndarray], batch: int, seconds: float
) -> tuple[float, float]:
    """(samples/s, p50 ms) of `predict` at `batch` rows, back to back for `seconds`."""
    n = next(iter(pool.values())).shape[0]
    batches = [{k: v[(i * batch) % n :][:batch] for k, v in pool.items()} for i in range(8)]
    batches = [b for b in batches if next(iter(b.values())).shape[0] == batch] or [
        {k: np.resize(v, (batch, *v.shape[1:])) for k, v in pool.items()}
    ]
    for b in batches[:3]:
        predict(b)
    times = []
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        predict(batches[i % len(batches)])
        times.append(time.perf_counter() - t0)
        i += 1
    return batch * len(times) / sum(times), statistics.median(times) * 1000


@dataclass
class Loaded:
    """A load level on a server, with what its metrics say it did meanwhile."""

    level: Level
    mean_batch: float  # rows per execution
    busy: float  # the share of the wall time the runtime ran


def measure(
    server: Server, requests: list[bytes], concurrencies: tuple[int, ...], seconds: float
) -> dict[int, Loaded]:
    out = {}
    for c in concurrencies:
        before = server.metrics()
        level = load(server.url, requests, c, seconds)
        after = server.metrics()
        rows = metric(after, ROWS) - metric(before, ROWS)
        executions = metric(after, EXECUTIONS) - metric(before, EXECUTIONS)
        busy = (metric(after, COMPUTE_SUM) - metric(before, COMPUTE_SUM)) / level.seconds
        out[c] = Loaded(level, rows / executions if executions else 1.0, busy)
    return out
