"""Regret of the default run: does `bakeoff run WORKLOAD` name what an exhaustive
search would, on this CPU?

Runs the workload twice, one after the other on this machine, each in a fresh
process with an empty variant cache and store of its own:

- the default run: the grid bakeoff's advice picks (no flags);
- the exhaustive run: every runtime that runs on this CPU and takes this model
  kind (`--runtimes`, listed from the backends' own availability and offers, GPU
  runtimes left out) at every precision (`--precisions all`); a runtime that has
  no path for a precision says so in the run itself, as unavailable.

Then, per batch size, it prints the default run's pick (its recommendation, else
its winner), the exhaustive run's leader, the ratio of their medians (the
leader's objective over the pick's, both as measured in the exhaustive run, so
machine drift between the runs does not enter) and whether the exhaustive run
separated its leader from the default pick. Target: the default pick is the
exhaustive leader, or not separated from it, at every batch size.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/default_regret.py
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

from bakeoff.backends import get_backend, runtime_names
from bakeoff.loader import load_workload
from bakeoff.workload.spec import Precision

GPU_MARKS = ("cuda", "tensorrt", "gpu")
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16", "bf16", "int8", "int4")


def cpu_runtimes(model_kind: str) -> list[str]:
    """Every installed CPU runtime that offers at least one precision of this model
    kind (the fake runtime is for tests only)."""
    found = []
    for name in runtime_names():
        if name == "fake" or any(mark in name for mark in GPU_MARKS):
            continue
        backend = get_backend(name)
        if not backend.availability().available:
            continue
        if any(o.reason is None for p in PRECISIONS for o in backend.offers(p, model_kind)):
            found.append(name)
    return found


def run(workload: str, args: list[str], folder: Path) -> tuple[float, dict[str, Any]]:
    """`bakeoff run` in a fresh process with an empty cache and store of its own."""
    folder.mkdir(parents=True)
    env = dict(os.environ, BAKEOFF_CACHE_DIR=str(folder / "cache"), HF_HUB_OFFLINE="1")
    out = folder / "result.json"
    cmd = [sys.executable, "-m", "bakeoff.cli", "run", workload, "--store", str(folder / "s.db")]
    cmd += ["--json", str(out), *args]
    print("$ bakeoff " + " ".join(cmd[3:]), flush=True)
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=folder, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if not out.exists():
        raise SystemExit(f"the run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    print(f"  {wall:.0f} s", flush=True)
    return wall, json.loads(out.read_text())


def objective_value(doc: dict[str, Any], cid: str, objective: str) -> float | None:
    """A candidate's median objective, higher is better (latency: 1 / p50)."""
    c = next((c for c in doc["candidates"] if c["id"] == cid), None)
    if c is None:
        return None
    if objective == "latency":
        p50 = (c.get("latency_ms") or {}).get("p50")
        return 1.0 / p50 if p50 else None
    return (c.get("throughput") or {}).get("samples_per_s")


def pick(verdict: dict[str, Any]) -> str | None:
    return verdict.get("recommended") or verdict.get("winner")


def separated(verdict: dict[str, Any], cid: str) -> str:
    """Whether the run's verdict separates its leader from `cid`, in words."""
    leader = verdict.get("winner") or (verdict["ranking"] or [None])[0]
    if cid == leader:
        return "is the leader"
    if any(cid in group and leader in group for group in verdict.get("ties") or []):
        return "tied with the leader"
    comparison = next((c for c in verdict.get("comparisons") or [] if c["id"] == cid), None)
    if comparison is None:
        return "not compared (not measured in the exhaustive run)"
    if comparison["decision"] == "faster":
        lo, hi = comparison["ci"]
        return f"separated: the leader is faster (CI {lo:.2f}-{hi:.2f})"
    return f"not separated ({comparison['decision']})"


def regret_table(default: dict[str, Any], exhaustive: dict[str, Any]) -> list[str]:
    lines = []
    by_batch = {v["batch_size"]: v for v in exhaustive["verdicts"]}
    for v in default["verdicts"]:
        b, objective = v["batch_size"], v["objective"]
        mine, ev = pick(v), by_batch.get(v["batch_size"])
        lines.append(f"batch {b} ({objective}):")
        lines.append(f"  default pick:       {mine}")
        if ev is None:
            lines.append("  the exhaustive run has no verdict at this batch size")
            continue
        leader = ev.get("winner") or (ev["ranking"] or [None])[0]
        lines.append(f"  exhaustive leader:  {leader}")
        lines.append(f"  exhaustive pick:    {pick(ev)}")
        a = objective_value(exhaustive, leader, objective) if leader else None
        m = objective_value(exhaustive, mine, objective) if mine else None
        ratio = f"{a / m:.3f}" if a and m else "-"
        lines.append(f"  leader / default pick (medians, exhaustive run): {ratio}")
        lines.append(f"  default pick in the exhaustive verdict: {separated(ev, mine or '')}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", nargs="?", default="builtin:minilm")
    parser.add_argument("--keep", type=Path, help="keep both runs' folders here")
    args = parser.parse_args()
    kind = load_workload(args.workload).source.kind
    runtimes = cpu_runtimes(kind)
    print(f"exhaustive grid: runtimes {', '.join(runtimes)}; precisions {', '.join(PRECISIONS)}")
    with tempfile.TemporaryDirectory(prefix="bakeoff-regret-") as tmp:
        root = args.keep or Path(tmp)
        t_default, default = run(args.workload, [], root / "default")
        exhaustive_args = ["--runtimes", ",".join(runtimes), "--precisions", "all"]
        t_all, exhaustive = run(args.workload, exhaustive_args, root / "exhaustive")
    print()
    print(f"default run:    {t_default:6.0f} s, {measured(default)} candidates measured")
    print(f"exhaustive run: {t_all:6.0f} s, {measured(exhaustive)} candidates measured")
    print("\n".join(regret_table(default, exhaustive)))


def measured(doc: dict[str, Any]) -> int:
    return sum(c["status"] == "ok" for c in doc["candidates"])


if __name__ == "__main__":
    main()
