"""Wall time of the default `builtin:minilm` run, split into build, quality and measuring.

Target: the whole default run in <= 5 minutes on 2 cores. Pass --quick to time
the smoke run instead (target <= 3 minutes). Uses a temporary store.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bakeoff import api


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", nargs="?", default="builtin:minilm")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bakeoff-ttv-") as tmp:
        started = time.perf_counter()
        result = api.run(
            args.workload, api.RunOptions(quick=args.quick, store=Path(tmp) / "bakeoff.db")
        )
        wall = time.perf_counter() - started
    t = result.document["timing_s"]
    quality = t["reference"] + t["measure_load_and_quality"]
    measuring = t["measure_warmup"] + t["measure_rounds"]
    target = 180 if args.quick else 300
    print(f"workload: {args.workload}{' (--quick)' if args.quick else ''}")
    print(f"build (export, convert, quantize):        {t['build']:7.1f} s")
    print(f"quality (reference + load, check each):   {quality:7.1f} s")
    print(f"measuring (warm-up + interleaved rounds): {measuring:7.1f} s")
    other = wall - t["build"] - quality - measuring
    print(f"other (workload, store, verdict):         {other:7.1f} s")
    print(f"total wall time:                          {wall:7.1f} s (target <= {target} s)")
    print(f"ratio to target: {wall / target:.2f}")
    for v in result.document["verdicts"]:
        sp = v["speedup"]
        gain = f"{sp['value']:.2f}x [{sp['ci95'][0]:.2f}-{sp['ci95'][1]:.2f}]" if sp else "-"
        print(f"batch {v['batch_size']}: winner {v['winner']}, speedup over baseline {gain}")


if __name__ == "__main__":
    main()
