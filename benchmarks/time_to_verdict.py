"""Time to a verdict for the default `builtin:minilm` run.

Prints the wall time of bakeoff's adaptive run (interleaved rounds, racing,
adaptive stopping), split into build, quality and measuring, and seconds per
candidate; target: the whole run in <= 120 s on 2 cores (issue 45) (--quick: <= 90 s).

With --before REV it runs the same workload with the code of commit REV too,
side by side in this one invocation, each run in a fresh process with an empty
variant cache and store (torch.compile's caches are a worker's own, and empty),
for each of --modes (default and quick): it prints each phase's seconds for
both, the ratio after/before, and whether the winners are the same candidates.

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
import subprocess
import sys
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
    build = phase_seconds(t, "build_and_reference")
    quality = t["measure_load_and_quality"]
    other = wall - build - quality - measuring_s(doc)
    print(f"== {label}")
    print(f"build + reference outputs:                {build:7.1f} s")
    print(f"load + quality check:                     {quality:7.1f} s")
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


PHASES = (
    ("build_and_reference", "build + reference outputs"),
    ("reference", "  of which reference outputs"),
    ("efficiency", "FLOP count + GEMM peak"),
    ("measure_load_and_quality", "load + quality check"),
    ("measure_warmup", "warm-up"),
    ("measure_rounds", "rounds (+ scenarios)"),
    ("measure_cold_start", "repeated cold starts"),
    ("total", "total (in the run)"),
)


def phase_seconds(timing: dict[str, Any], key: str) -> float:
    """A phase's seconds from a run's `timing_s`; builds and the reference's outputs
    together are one phase, before anything is loaded to be timed (code that ran
    them one after the other reports them apart)."""
    if key == "build_and_reference":
        if timing.get("reference_beside_builds"):
            return float(timing.get("build", 0.0))
        return float(timing.get("build", 0.0)) + float(timing.get("reference", 0.0))
    return float(timing.get(key, 0.0))


def run_in_process(
    workload: str, quick: bool, src: Path | None, tmp: Path
) -> tuple[float, dict[str, Any]]:
    """`bakeoff run` in a fresh process, with the code under `src` (None: this
    checkout's), an empty variant cache and store of its own."""
    env = dict(os.environ, BAKEOFF_CACHE_DIR=str(tmp / "cache"), HF_HUB_OFFLINE="1")
    if src is not None:
        env["PYTHONPATH"] = str(src)  # workers inherit it, so they run that code too
    out = tmp / "result.json"
    cmd = [sys.executable, "-m", "bakeoff.cli", "run", workload, "--store", str(tmp / "s.db")]
    cmd += ["--json", str(out), *(["--quick"] if quick else [])]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if not out.exists():
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, json.loads(out.read_text())


def winners(doc: dict[str, Any]) -> dict[int, str | None]:
    return {v["batch_size"]: v["winner"] for v in doc["verdicts"]}


def side_by_side(label: str, runs: dict[str, tuple[float, dict[str, Any]]]) -> None:
    names = list(runs)
    print(f"== {label}")
    print(
        f"{'phase':38}"
        + "".join(f"{n:>14}" for n in names)
        + ("     after/before" if len(names) == 2 else "")
    )

    def row(name: str, values: list[float], fmt: str = "{:12.1f} s") -> None:
        ratio = f"{values[-1] / values[0]:17.2f}" if len(values) == 2 and values[0] else ""
        print(f"{name:38}" + "".join(fmt.format(v) for v in values) + ratio)

    for key, name in PHASES:
        row(name, [phase_seconds(doc["timing_s"], key) for _, doc in runs.values()])
    row("wall time (the whole command)", [wall for wall, _ in runs.values()])
    counts = [
        sum(c["status"] not in ("unavailable",) for c in doc["candidates"])
        for _, doc in runs.values()
    ]
    row("candidates measured or tried", [float(n) for n in counts], "{:14.0f}")
    row(
        "seconds per candidate",
        [wall / max(n, 1) for (wall, _), n in zip(runs.values(), counts, strict=True)],
    )
    for name, (_, doc) in runs.items():
        print(f"  {name}: winners {winners(doc)}")
    if len(runs) == 2:
        a, b = (winners(doc) for _, doc in runs.values())
        print(f"  same winners at every batch size: {'yes' if a == b else 'NO'}")


def compare_with(workload: str, before: str, modes: list[str]) -> None:
    """Each mode run with this checkout's code and with commit `before`'s."""
    with tempfile.TemporaryDirectory(prefix="bakeoff-ttv-") as tmp_dir:
        tmp = Path(tmp_dir)
        old = tmp / "before"
        old.mkdir()
        archive = subprocess.run(
            ["git", "archive", before, "src"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        for mode in modes:
            runs: dict[str, tuple[float, dict[str, Any]]] = {}
            for name, src in ((f"before {before[:10]}", old / "src"), ("after", None)):
                where = tmp / f"{mode}-{name.split()[0]}"
                where.mkdir()
                print(f"running {mode} with the code {name} ...", flush=True)
                runs[name] = run_in_process(workload, mode == "quick", src, where)
            side_by_side(f"{workload} ({mode})", runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", nargs="?", default="builtin:minilm")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--compare-fixed", action="store_true")
    parser.add_argument("--fixed-seconds", type=float, default=10.0)
    parser.add_argument("--save", help="write the result documents to this JSON file")
    parser.add_argument("--before", help="a commit to time side by side with this checkout")
    parser.add_argument("--modes", default="default,quick", help="with --before: which runs")
    args = parser.parse_args()
    if args.before:
        compare_with(args.workload, args.before, args.modes.split(","))
        return

    wall, doc = timed_run(args.workload, quick=args.quick)
    report("adaptive (bakeoff)", wall, doc, 90.0 if args.quick else 120.0)
    if not args.compare_fixed:
        if args.save:
            Path(args.save).write_text(json.dumps({"adaptive": doc}))
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
