"""Time to a verdict for the default `builtin:minilm` run.

Prints the wall time of bakeoff's adaptive run (interleaved rounds, racing,
adaptive stopping), split into build, quality and measuring; target: the whole
run in <= 5 minutes on 2 cores (--quick: <= 3 minutes).

With --compare-fixed it then runs the same candidates the way common tools do
(10 warm-up calls, then at least 10 s per candidate, one after the other),
says whether both reach the same ranking, and prints two ratios:

- time to a decided verdict, adaptive / fixed (target <= 0.5): from the first
  warm-up call to the verdict, the part of a run that racing and adaptive
  stopping replace with the fixed-length protocol above;
- whole runs, adaptive / fixed: the same, plus the build and quality check that
  both runs do identically before their first timed call (on MiniLM on 2 cores
  they take about three quarters of the adaptive run, so this ratio cannot reach
  0.5 by any way of sampling; it is printed so nobody has to take that on trust).

Uses temporary stores.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bakeoff import api

# Workers inherit the environment, so this sends the variant cache into the run's
# temp dir. (Every timed worker compiles torch.compile in an empty cache of its own.)
_CACHE_VARIABLES = ("BAKEOFF_CACHE_DIR",)


def timed_run(workload: str, **options: Any) -> tuple[float, dict[str, Any]]:
    """One run with its own store and its own empty variant cache.

    Without a fresh cache the second run of a pair would reuse the first one's
    built variants and look faster.
    """
    with tempfile.TemporaryDirectory(prefix="bakeoff-ttv-") as tmp:
        saved = {k: os.environ.get(k) for k in _CACHE_VARIABLES}
        for k in _CACHE_VARIABLES:
            os.environ[k] = str(Path(tmp) / k.lower())
        try:
            started = time.perf_counter()
            result = api.run(workload, api.RunOptions(store=Path(tmp) / "bakeoff.db", **options))
            return time.perf_counter() - started, result.document
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


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


def _objective_ci(doc: dict[str, Any], cid: str, objective: str) -> tuple[float, float]:
    """The candidate's objective as (lo, hi) on a higher-is-better scale."""
    c = next(c for c in doc["candidates"] if c["id"] == cid)
    if objective == "latency":
        lo, hi = c["latency_ms"]["ci95"]["p50"]
        return -hi, -lo
    lo, hi = c["throughput"]["ci95"]
    return lo, hi


def separated_pairs(doc: dict[str, Any], verdict: dict[str, Any]) -> list[tuple[str, str]]:
    """Pairs (better, worse) whose 95% CIs of the objective do not overlap."""
    ranking, objective = verdict["ranking"], verdict["objective"]
    pairs = []
    for i, a in enumerate(ranking):
        for b in ranking[i + 1 :]:
            if _objective_ci(doc, a, objective)[0] > _objective_ci(doc, b, objective)[1]:
                pairs.append((a, b))
    return pairs


def same_ranking(adaptive: dict[str, Any], fixed: dict[str, Any]) -> tuple[int, int]:
    """How many of the pairs the adaptive run separates the fixed run orders the same way.

    Pairs the adaptive run cannot separate (overlapping CIs, or tied with the
    winner) carry no ranking to reproduce, so they are not counted.
    """
    agree = total = 0
    for va, vb in zip(adaptive["verdicts"], fixed["verdicts"], strict=True):
        tied = {x for group in va["ties"] for x in group}
        order_b = vb["ranking"]
        for a, b in separated_pairs(adaptive, va):
            if {a, b} <= tied or a not in order_b or b not in order_b:
                continue
            total += 1
            agree += order_b.index(a) < order_b.index(b)
    return agree, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", nargs="?", default="builtin:minilm")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--compare-fixed", action="store_true")
    parser.add_argument("--fixed-seconds", type=float, default=10.0)
    parser.add_argument("--save", help="write both result documents to this JSON file")
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
    agree, total = same_ranking(doc, fixed_doc)
    print(
        f"same ranking: {agree} of the {total} pairs the adaptive run separates are in the "
        f"same order in the fixed-length run ({'yes' if agree == total else 'NO'})"
    )
    if args.save:
        Path(args.save).write_text(json.dumps({"adaptive": doc, "fixed": fixed_doc}))
    adaptive_s, fixed_s = measuring_s(doc), measuring_s(fixed_doc)
    print(
        f"time to a decided verdict (warm-up + timed calls): adaptive {adaptive_s:.1f} s, "
        f"fixed {fixed_s:.1f} s, ratio {adaptive_s / fixed_s:.2f} (target <= 0.5)"
    )
    shared = wall - adaptive_s
    print(
        f"whole runs: adaptive {wall:.1f} s, fixed {fixed_wall:.1f} s, ratio "
        f"{wall / fixed_wall:.2f} (both include the same build and quality check, "
        f"{shared:.0f} s of the adaptive run)"
    )


if __name__ == "__main__":
    main()
