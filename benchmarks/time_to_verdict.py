"""Time to a verdict for the default `builtin:minilm` run.

Prints the wall time of bakeoff's adaptive run (interleaved rounds, racing,
adaptive stopping), split into build, quality and measuring; target: the whole
run in <= 5 minutes on 2 cores (--quick: <= 3 minutes).

With --compare-fixed it then runs the same candidates the way common tools do
(10 warm-up calls, then at least 10 s per candidate, one after the other) and
prints the ratio of the two wall times, and whether both reach the same ranking
(target ratio <= 0.5). Both runs use the same build and load steps, so the
ratio of the measuring phases is printed too. Uses temporary stores.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bakeoff import api


def timed_run(workload: str, **options: Any) -> tuple[float, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bakeoff-ttv-") as tmp:
        started = time.perf_counter()
        result = api.run(workload, api.RunOptions(store=Path(tmp) / "bakeoff.db", **options))
        return time.perf_counter() - started, result.document


def measuring_s(doc: dict[str, Any]) -> float:
    t = doc["timing_s"]
    return float(t["measure_warmup"] + t["measure_rounds"])


def report(label: str, wall: float, doc: dict[str, Any], target: float | None) -> None:
    t = doc["timing_s"]
    quality = t["reference"] + t["measure_load_and_quality"]
    other = wall - t["build"] - quality - measuring_s(doc)
    print(f"== {label}")
    print(f"build (export, convert, quantize):        {t['build']:7.1f} s")
    print(f"quality (reference + load, check each):   {quality:7.1f} s")
    print(f"measuring (warm-up + timed calls):        {measuring_s(doc):7.1f} s")
    print(f"other (workload, store, verdict):         {other:7.1f} s")
    line = f"total wall time:                          {wall:7.1f} s"
    print(line + (f" (target <= {target:.0f} s, ratio {wall / target:.2f})" if target else ""))
    for v in doc["verdicts"]:
        sp = v["speedup"]
        gain = f"{sp['value']:.2f}x [{sp['ci95'][0]:.2f}-{sp['ci95'][1]:.2f}]" if sp else "-"
        print(f"  batch {v['batch_size']}: winner {v['winner']}, speedup over baseline {gain}")
        print(f"    ranking: {', '.join(v['ranking'])}")


def same_ranking(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Same winner and the same order, except where the adaptive run reports a tie."""
    for va, vb in zip(a["verdicts"], b["verdicts"], strict=True):
        tied = {x for group in va["ties"] for x in group}
        order_a = [x for x in va["ranking"] if x not in tied]
        order_b = [x for x in vb["ranking"] if x not in tied and x in va["ranking"]]
        if va["winner"] not in (tied or {vb["winner"]}) or order_a != order_b:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", nargs="?", default="builtin:minilm")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--compare-fixed", action="store_true")
    parser.add_argument("--fixed-seconds", type=float, default=10.0)
    args = parser.parse_args()

    wall, doc = timed_run(args.workload, quick=args.quick)
    report("adaptive (bakeoff)", wall, doc, 180.0 if args.quick else 300.0)
    if not args.compare_fixed:
        return
    fixed_wall, fixed_doc = timed_run(args.workload, fixed_seconds=args.fixed_seconds)
    report(
        f"fixed length (10 warm-up calls, {args.fixed_seconds:g} s each)",
        fixed_wall,
        fixed_doc,
        None,
    )
    print(f"same ranking: {'yes' if same_ranking(doc, fixed_doc) else 'NO'}")
    print(
        f"ratio of measuring phases adaptive/fixed: {measuring_s(doc) / measuring_s(fixed_doc):.2f}"
    )
    print(f"ratio of whole runs adaptive/fixed: {wall / fixed_wall:.2f} (target <= 0.5)")


if __name__ == "__main__":
    main()
