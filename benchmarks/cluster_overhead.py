"""What Ray costs bakeoff: starting and stopping a simulated cluster, and whether a run
on a cluster node measures what a plain local run measures.

1. The wall time to start a `local:2` cluster (`bakeoff.distributed.session.connect`) and
   to stop it, `--starts` times.
2. The same workload and candidate (default `builtin:minilm`, ONNX Runtime FP32 at
   batch 1, `--quick`) run plainly and through `bakeoff run --cluster local:1`, in
   turns (plain, cluster, plain, ...) so the machine's drift hits both alike; the
   ratio of the cluster run's median latency to the plain run's, per turn and the
   median of the turns (target: within 0.95-1.05). A `local:1` node holds every core,
   as the plain run does: the figure is what the runner, its pinning and its
   process add, and Ray is never inside a timed call.

    python benchmarks/cluster_overhead.py [--turns 3] [--starts 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bakeoff import api
from bakeoff.cluster.sweep import SweepOptions, run_sweep
from bakeoff.distributed.session import connect, parse_cluster
from bakeoff.store import Store


class _Quiet:
    def note(self, message: str) -> None:
        pass

    def connected(self, session: Any) -> None:
        pass

    def assigned(self, workload: str, node: Any) -> None:
        pass


def _p50(doc: dict[str, Any], candidate: str) -> float:
    c = next(c for c in doc["candidates"] if c["id"] == candidate)
    return float(c["latency_ms"]["p50"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="builtin:minilm")
    parser.add_argument("--runtime", default="onnxruntime")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    candidate = f"{args.runtime}-fp32-b1"
    options = {
        "quick": True,
        "runtimes": [args.runtime],
        "precisions": ["fp32"],
        "batch_sizes": [1],
    }
    with tempfile.TemporaryDirectory(prefix="bkr-", dir="/tmp") as tmp:
        root = Path(tmp)
        starts, stops = [], []
        spec = parse_cluster("local:2")
        assert spec is not None
        for i in range(args.starts):
            t0 = time.perf_counter()
            with connect(spec, root / f"c{i}") as session:
                t1 = time.perf_counter()
                assert len(session.nodes) == 2
            stops.append(time.perf_counter() - t1)
            starts.append(t1 - t0)
        print(
            f"local:2 cluster: start {statistics.median(starts):.1f} s, stop "
            f"{statistics.median(stops):.1f} s (median of {args.starts}; "
            f"starts {', '.join(f'{s:.1f}' for s in starts)})"
        )
        ratios = []
        for turn in range(args.turns):
            plain = api.run(
                args.workload,
                api.RunOptions(store=root / f"plain{turn}.db", seed=turn, **options),
            ).document
            store = root / f"cluster{turn}.db"
            swept = run_sweep(
                [args.workload],
                SweepOptions(
                    cluster="local:1",
                    cluster_tmp=root / f"r{turn}",
                    store=store,
                    run_options={**options, "seed": turn},
                ),
                _Quiet(),
            )
            with Store(store) as s:
                on_node = s.run(swept.document["runs"][0]["run_id"])["document"]
            ratio = _p50(on_node, candidate) / _p50(plain, candidate)
            ratios.append(ratio)
            print(
                f"turn {turn + 1}: {candidate} p50 plain {_p50(plain, candidate):.4f} ms, "
                f"on a local:1 node {_p50(on_node, candidate):.4f} ms: ratio {ratio:.3f}"
            )
        median = statistics.median(ratios)
        verdict = "met" if 0.95 <= median <= 1.05 else "NOT met"
        print(f"median ratio (cluster node / plain): {median:.3f} (target 0.95-1.05: {verdict})")


if __name__ == "__main__":
    main()
