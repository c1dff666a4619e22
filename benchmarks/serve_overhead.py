"""What `bakeoff serve` costs over calling the runtime in-process, for the MiniLM winner.

Runs `bakeoff run builtin:minilm` (or takes `--run-id`) and serves its winner three
ways, each on the same cores, one at a time:

- as `bakeoff serve RUN` with no flags (`auto`'s defaults, which without
  --latency-bound-ms bound the batch size and queue delay by the variant's batch-1
  latency): at concurrency 1, 8 and 32, and one request at a time interleaved with
  the same exported model called in-process at batch 1;
- the same export with `--latency-bound-ms` twice the largest p99 the run measured
  (so every measured batch size is allowed and the delay is auto's usual half of a
  batch's p50): at concurrency 1, 8 and 32, and at 32 in turns with the runtime
  in-process at the batch size the run measured best;
- with batching off (--max-batch-size 1), at concurrency 32.

It prints each against the targets: a lone request on the default-served winner
within 2 ms (p50) of in-process batch 1, and at most 1 ms of added p50 for the
server's own overhead; served throughput at concurrency 32, on the server that may
batch, at least 0.9x the best in-process throughput the run measured for the
variant. Since this machine's speed drifts by tens of percent over minutes, the
served and in-process figures are also measured side by side (interleaved, as
bakeoff's own trials are, so that drift hits both alike): at concurrency 1 in
blocks of ten calls (`--pairs`), at concurrency 32 in turns of seconds (`--turns`,
each side first in every other turn, the median of the turns' ratios printed). The
throughput target is printed both ways: against the run's own figure, measured
minutes earlier, and side by side. The clients are in `serve_clients.py`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import tempfile
from pathlib import Path

import numpy as np

from bakeoff import api, export
from bakeoff.batching import read_split, split_names
from bakeoff.paths import RunFolder
from serve_clients import (
    BLOCK,
    COMPUTE_SUM,
    EXECUTIONS,
    Loaded,
    Server,
    address,
    in_process,
    infer_request,
    interleaved,
    load,
    measure,
    metric,
)

LONE_TARGET_MS = 2.0  # a lone request on the default-served winner vs in-process batch 1
OVERHEAD_TARGET_MS = 1.0  # the server's own added p50 at concurrency 1
THROUGHPUT_TARGET = 0.9  # served at concurrency 32 / the best in-process
LEVELS = (1, 8, 32)


def _met(ok: bool) -> str:
    return "met" if ok else "missed"


def _table(served: list[tuple[str, Loaded]], local: dict[int, tuple[float, float]]) -> None:
    print(
        f"{'load':<34}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
        f"{'mean batch':>12}{'client CPU':>12}"
    )
    for label, loaded in served:
        lv = loaded.level
        cpu = lv.client_cpu_s / lv.seconds
        print(
            f"{label:<34}{lv.throughput:>10.1f}{lv.pct(50):>9.2f}{lv.pct(99):>9.2f}"
            f"{lv.errors:>8}{loaded.mean_batch:>12.1f}{cpu:>11.0%}"
        )
    for b, (sps, p50) in local.items():
        print(f"{f'in-process, batch {b}':<34}{sps:>10.1f}{p50:>9.2f}")


def _started(label: str, server: Server) -> None:
    print(f"{label}:")
    for line in server.lines:
        print(f"  | {line}")


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

    # 1. The winner as `bakeoff serve RUN` serves it with no flags.
    default = Server([run_id, "--store", str(store)])
    _started("bakeoff serve RUN (no flags)", default)
    folder = Path(re.search(r" from (\S+)$", default.lines[0]).group(1))  # type: ignore[union-attr]
    manifest = json.loads((folder / "manifest.json").read_text())
    data = RunFolder.of(store, manifest["run_id"]).data
    with np.load(data, allow_pickle=False) as z:
        names = split_names(z.files, "quality")
    pool, _ = read_split(data, "quality", names)
    # 32 one-row requests, the same rows the in-process calls at concurrency 1 take
    singles = [{k: v[i : i + 1] for k, v in pool.items()} for i in range(32)]
    host, _ = address(default.url)
    requests = [infer_request(host, manifest["workload"], x, "output") for x in singles]
    on_default = measure(default, requests, LEVELS, args.seconds)
    # A lone request, against the runtime in-process at batch 1, interleaved block by block.
    predict = export.load(folder)
    for single in singles[:3]:
        predict(single)
    before = default.metrics()
    one = interleaved(default.url, requests, predict, singles, args.pairs, BLOCK)
    after = default.metrics()
    computed = metric(after, COMPUTE_SUM) - metric(before, COMPUTE_SUM)
    server_compute_ms = 1000 * computed / (metric(after, EXECUTIONS) - metric(before, EXECUTIONS))
    default_settings = f"{default.max_batch} row(s), {default.delay_ms:g} ms delay"
    default.stop()

    # 2. The same export, with a latency bound that lets auto batch at any measured size.
    measured = manifest["measured_by_batch_size"]
    bound_ms = math.ceil(2 * max(r["p99_ms"] for r in measured))
    batching = Server([str(folder), "--latency-bound-ms", str(bound_ms)])
    _started(f"\nbakeoff serve EXPORT --latency-bound-ms {bound_ms}", batching)
    on_batching = measure(batching, requests, LEVELS, args.seconds)
    # Throughput at concurrency 32 in turns with the runtime in-process at the batch
    # size the run measured best: the target's figure, on the machine as it is now.
    best = max(measured, key=lambda r: r["samples_per_s"])
    best_batch = int(best["batch_size"])
    throughput_turns = []
    for turn in range(args.turns):  # each side first in every other turn
        if turn % 2:
            served_sps = load(batching.url, requests, 32, args.seconds / 2).throughput
            local_sps, _ = in_process(predict, pool, best_batch, args.seconds / 2)
        else:
            local_sps, _ = in_process(predict, pool, best_batch, args.seconds / 2)
            served_sps = load(batching.url, requests, 32, args.seconds / 2).throughput
        throughput_turns.append((served_sps, local_sps))
    batching_settings = f"{batching.max_batch} row(s), {batching.delay_ms:g} ms delay"
    batching.stop()

    # 3. Batching off.
    off = Server(
        [str(folder), "--max-batch-size", "1", "--max-queue-delay-ms", "0", "--instances", "1"]
    )
    off_32 = measure(off, requests, (32,), args.seconds)[32]
    off.stop()

    formed = [lv.mean_batch for lv in (*on_default.values(), *on_batching.values())]
    sizes = sorted({1, batching.max_batch, *(max(1, round(b)) for b in formed)})
    local = {b: in_process(predict, pool, b, args.seconds / 2) for b in sizes}
    # an offline sweep's figure (several streams) counts too where the run made one
    run_best = max(max(r["samples_per_s"], r.get("offline_samples_per_s") or 0) for r in measured)
    now_best = max(sps for sps, _ in local.values())

    print(f"\n== bakeoff serve overhead: {manifest['candidate']} of run {manifest['run_id']}")
    print(f"servers: default = no flags ({default_settings}); ", end="")
    print(f"bound = --latency-bound-ms {bound_ms} ({batching_settings}); off = batches of 1")
    _table(
        [
            *((f"default, concurrency {c}", lv) for c, lv in on_default.items()),
            *((f"bound {bound_ms} ms, concurrency {c}", lv) for c, lv in on_batching.items()),
            ("batching off, concurrency 32", off_32),
        ],
        local,
    )
    print(
        f"client CPU: the load generator's CPU time over the wall time "
        f"(of {os.cpu_count()} logical CPUs: {100 * (os.cpu_count() or 1)}%)"
    )
    busy = [*on_default.items(), *((f"{c} (bound)", lv) for c, lv in on_batching.items())]
    print(
        "the runtime ran (its metrics' compute time over the wall time): "
        + ", ".join(f"{lv.busy:.0%} at concurrency {c}" for c, lv in busy)
    )
    print(
        f"one request at a time on the default server, interleaved in "
        f"{len(one.pair_differences_ms)} pairs of blocks of {BLOCK - 1} timed calls: p50 served "
        f"{statistics.median(one.served_ms):.2f} ms, in-process "
        f"{statistics.median(one.local_ms):.2f} ms; the pairs' differences of medians range "
        f"{min(one.pair_differences_ms):.2f} to "
        f"{max(one.pair_differences_ms):.2f} ms"
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
    added = one.added_p50
    print(
        f"  lone request on the winner served with no flags ({default_settings}): p50 "
        f"{added:+.2f} ms over in-process batch 1, interleaved (target within "
        f"{LONE_TARGET_MS:g} ms: {_met(abs(added) <= LONE_TARGET_MS)}; the server's own "
        f"overhead target <= {OVERHEAD_TARGET_MS:g} ms: {_met(added <= OVERHEAD_TARGET_MS)}; "
        f"the median of the pairs' differences: "
        f"{statistics.median(one.pair_differences_ms):.2f} ms)"
    )
    c32 = on_batching[32].level.throughput
    print(
        f"  served at concurrency 32 (bound {bound_ms} ms) / best in-process the run measured "
        f"({run_best:.1f}/s): {c32 / run_best:.2f} (target >= {THROUGHPUT_TARGET:g}: "
        f"{_met(c32 / run_best >= THROUGHPUT_TARGET)}, as measured minutes apart)"
    )
    drift = statistics.median(lc for _, lc in throughput_turns) / best["samples_per_s"]
    print(
        f"    the machine now: in-process batch {best_batch} runs at {drift:.2f}x the run's "
        f"{best['samples_per_s']:.1f}/s (the median of the turns below; this VM's speed drifts)"
    )
    for label, figure in (
        (f"bound {bound_ms} ms", c32),
        ("default, no flags", on_default[32].level.throughput),
    ):
        print(
            f"  served at concurrency 32 ({label}) / best in-process measured now "
            f"({now_best:.1f}/s): {figure / now_best:.2f}"
        )
    ratio = statistics.median(sv / lc for sv, lc in throughput_turns)
    turns_words = ", ".join(f"{sv:.1f} vs {lc:.1f}" for sv, lc in throughput_turns)
    print(
        f"  served at concurrency 32 (bound {bound_ms} ms) / in-process at batch {best_batch}, "
        f"in turns: {ratio:.2f} (target >= {THROUGHPUT_TARGET:g}: "
        f"{_met(ratio >= THROUGHPUT_TARGET)}, as measured side by side: the ratio above with "
        f"the drift taken out; the median of {len(throughput_turns)}: {turns_words} /s)"
    )
    print(
        f"  batching on (bound {bound_ms} ms) / off at concurrency 32: "
        f"{c32 / off_32.level.throughput:.2f}"
    )
    tmp.cleanup()


if __name__ == "__main__":
    main()
