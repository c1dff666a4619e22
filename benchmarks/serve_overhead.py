"""What `bakeoff serve` costs over calling the runtime in-process, for the MiniLM winner.

Runs `bakeoff run builtin:minilm` (or takes `--run-id`), serves its winner with
`auto` settings, and on the same cores measures:

- through the server, at concurrency 1, 8 and 32: throughput and p50/p99 latency;
- the same exported model called in-process (no server) at batch 1, at the mean
  batch the server formed (read from its /metrics) and at its batch limit;
- the server with batching off (--max-batch-size 1), at concurrency 32.

It prints each ratio against the targets: served throughput at concurrency 32 at
least 0.9x the best in-process throughput the run measured for the variant, and
at most 1 ms of added p50 latency at concurrency 1. Since this machine's speed
drifts by tens of percent over minutes, the served and in-process figures are
also measured side by side (interleaved, as bakeoff's own trials are, so that
drift hits both alike): at concurrency 1 in blocks of ten calls (`--pairs`), at
concurrency 32 in turns of seconds against the batch size the run measured best
(`--turns`, each side first in every other turn, the median of the turns' ratios
printed). The throughput target is printed both ways: against the run's own
figure, measured minutes earlier, and side by side.

The load generator is a plain asyncio HTTP/1.1 keep-alive client (one connection
per simulated user, Triton's binary tensor format, so neither side parses JSON
arrays): an httpx client spends more CPU per request than the server overhead
being measured. Its CPU time is counted and printed, since client and server
share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import uvloop

from bakeoff import api, export
from bakeoff.batching import read_split, split_names
from bakeoff.paths import RunFolder


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


def _address(url: str) -> tuple[str, int]:
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
                _user(Connection(*_address(url)), requests, deadline, latencies, errors)
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
    sock = socket.create_connection(_address(url))
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


def _met(ok: bool) -> str:
    return "met" if ok else "missed"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run-id", help="a finished builtin:minilm run (default: run one now)")
    parser.add_argument("--store", type=Path, help="the store of --run-id")
    parser.add_argument("--quick", action="store_true", help="run the bake-off with --quick")
    parser.add_argument("--seconds", type=float, default=8.0, help="per load level")
    parser.add_argument("--turns", type=int, default=8, help="served/in-process turns at 32")
    parser.add_argument(
        "--pairs",
        type=int,
        default=60,
        help=f"interleaved pairs of blocks of {BLOCK} calls at concurrency 1",
    )
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bakeoff-serve-")
    store = args.store or Path(tmp.name) / "bakeoff.db"
    run_id = args.run_id
    if run_id is None:
        print("running bakeoff run builtin:minilm ...", flush=True)
        run_id = api.run("builtin:minilm", api.RunOptions(quick=args.quick, store=store)).run_id

    served = Server([run_id, "--store", str(store)])
    for line in served.lines:
        print(f"  | {line}")
    folder = Path(re.search(r" from (\S+)$", served.lines[0]).group(1))  # type: ignore[union-attr]
    manifest = json.loads((folder / "manifest.json").read_text())
    data = RunFolder.of(store, manifest["run_id"]).data
    with np.load(data, allow_pickle=False) as z:
        names = split_names(z.files, "quality")
    pool, _ = read_split(data, "quality", names)
    # 32 one-row requests, the same rows the in-process calls at concurrency 1 take
    singles = [{k: v[i : i + 1] for k, v in pool.items()} for i in range(32)]
    host, _ = _address(served.url)
    requests = [infer_request(host, manifest["workload"], x, "output") for x in singles]

    levels: dict[int, Level] = {}
    formed: dict[int, float] = {}  # concurrency -> the mean batch the server formed there
    busy: dict[int, float] = {}  # concurrency -> the share of the time the runtime ran
    for c in (1, 8, 32):
        before = served.metrics()
        levels[c] = load(served.url, requests, c, args.seconds)
        after = served.metrics()
        rows = metric(after, ROWS) - metric(before, ROWS)
        executions = metric(after, EXECUTIONS) - metric(before, EXECUTIONS)
        formed[c] = rows / executions if executions else 1.0
        busy[c] = (metric(after, COMPUTE_SUM) - metric(before, COMPUTE_SUM)) / levels[c].seconds
    max_batch = int(re.search(r"batches of up to (\d+)", "\n".join(served.lines)).group(1))  # type: ignore[union-attr]

    # Added latency at concurrency 1: served and in-process interleaved block by block.
    predict = export.load(folder)
    for single in singles[:3]:
        predict(single)
    before = served.metrics()
    one = interleaved(served.url, requests, predict, singles, args.pairs, BLOCK)
    after = served.metrics()
    computed = metric(after, COMPUTE_SUM) - metric(before, COMPUTE_SUM)
    server_compute_ms = 1000 * computed / (metric(after, EXECUTIONS) - metric(before, EXECUTIONS))
    # Throughput at concurrency 32 in turns with the runtime in-process at the batch
    # size the run measured best: the target's figure, on the machine as it is now.
    measured = manifest["measured_by_batch_size"]
    best = max(measured, key=lambda r: r["samples_per_s"])
    best_batch = int(best["batch_size"])
    throughput_turns = []
    for turn in range(args.turns):  # each side first in every other turn
        if turn % 2:
            served_sps = load(served.url, requests, 32, args.seconds / 2).throughput
            local_sps, _ = in_process(predict, pool, best_batch, args.seconds / 2)
        else:
            local_sps, _ = in_process(predict, pool, best_batch, args.seconds / 2)
            served_sps = load(served.url, requests, 32, args.seconds / 2).throughput
        throughput_turns.append((served_sps, local_sps))
    served.stop()

    off = Server(
        [str(folder), "--max-batch-size", "1", "--max-queue-delay-ms", "0", "--instances", "1"]
    )
    off_level = load(off.url, requests, 32, args.seconds)
    off.stop()

    sizes = sorted({1, max_batch, *(max(1, round(b)) for b in formed.values())})
    local = {b: in_process(predict, pool, b, args.seconds / 2) for b in sizes}
    # an offline sweep's figure (several streams) counts too where the run made one
    run_best = max(max(r["samples_per_s"], r.get("offline_samples_per_s") or 0) for r in measured)
    now_best = max(sps for sps, _ in local.values())

    print(f"\n== bakeoff serve overhead: {manifest['candidate']} of run {manifest['run_id']}")
    print(
        f"{'load':<28}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
        f"{'mean batch':>12}{'client CPU':>12}"
    )
    rows_out = [(f"served, concurrency {c}", lv, f"{formed[c]:.1f}") for c, lv in levels.items()]
    for label, lv, batch in [*rows_out, ("batching off, conc. 32", off_level, "1")]:
        cpu = lv.client_cpu_s / lv.seconds
        print(
            f"{label:<28}{lv.throughput:>10.1f}{lv.pct(50):>9.2f}{lv.pct(99):>9.2f}"
            f"{lv.errors:>8}{batch:>12}{cpu:>11.0%}"
        )
    for b, (sps, p50) in local.items():
        print(f"{f'in-process, batch {b}':<28}{sps:>10.1f}{p50:>9.2f}")
    print(
        f"client CPU: the load generator's CPU time over the wall time "
        f"(of {os.cpu_count()} logical CPUs: {100 * (os.cpu_count() or 1)}%)"
    )
    print(
        "the runtime ran (its metrics' compute time over the wall time): "
        + ", ".join(f"{share:.0%} at concurrency {c}" for c, share in busy.items())
    )
    print(
        f"one request at a time, interleaved in {len(one.pair_differences_ms)} pairs of blocks "
        f"of {BLOCK - 1} timed calls: p50 served {statistics.median(one.served_ms):.2f} ms, "
        f"in-process {statistics.median(one.local_ms):.2f} ms; the pairs' differences of "
        f"medians range {min(one.pair_differences_ms):.2f} to {max(one.pair_differences_ms):.2f} ms"
    )
    print(
        f"  the blocks' dropped first calls, p50: served {statistics.median(one.dropped_ms[0]):.2f}"
        f" ms, in-process {statistics.median(one.dropped_ms[1]):.2f} ms"
    )
    print(
        f"  of which the runtime's own call: {server_compute_ms:.2f} ms in the server (mean, "
        f"its metrics, the blocks' first calls included), {statistics.fmean(one.local_ms):.2f} ms "
        "in-process (mean)"
    )
    print("\nratios")
    c32 = levels[32].throughput
    print(
        f"  served at concurrency 32 / best in-process the run measured ({run_best:.1f}/s): "
        f"{c32 / run_best:.2f} (target >= 0.90: {_met(c32 / run_best >= 0.9)}, as measured "
        "minutes apart)"
    )
    drift = statistics.median(lc for _, lc in throughput_turns) / best["samples_per_s"]
    print(
        f"    the machine now: in-process batch {best_batch} runs at {drift:.2f}x the run's "
        f"{best['samples_per_s']:.1f}/s (the median of the turns below; this VM's speed drifts)"
    )
    print(
        f"  served at concurrency 32 / best in-process measured now ({now_best:.1f}/s): "
        f"{c32 / now_best:.2f}"
    )
    ratio = statistics.median(sv / lc for sv, lc in throughput_turns)
    turns_words = ", ".join(f"{sv:.1f} vs {lc:.1f}" for sv, lc in throughput_turns)
    print(
        f"  served at concurrency 32 / in-process at batch {best_batch}, in turns: {ratio:.2f} "
        f"(target >= 0.90: {_met(ratio >= 0.9)}, as measured side by side: the ratio above "
        f"with the drift taken out; the median of {len(throughput_turns)}: {turns_words} /s)"
    )
    print(
        f"  added p50 at concurrency 1: {one.added_p50:.2f} ms over in-process batch 1, "
        f"interleaved (target <= 1 ms: {_met(one.added_p50 <= 1.0)}; the median of the pairs' "
        f"differences: {statistics.median(one.pair_differences_ms):.2f} ms)"
    )
    print(f"  batching on / off at concurrency 32: {c32 / off_level.throughput:.2f}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
