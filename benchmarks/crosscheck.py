"""Cross-check bakeoff's OpenVINO latency against OpenVINO's own benchmark_app.

What: bakeoff builds and measures the built-in MiniLM workload (openvino, fp32,
batch 1) and benchmark_app times the very same IR with the same settings. The
figure is the ratio of medians, bakeoff / benchmark_app; target 0.9-1.1. A ratio
far from 1 means bakeoff's timing loop or its runtime settings add (or hide) cost
that OpenVINO's reference tool does not see.

Why this shape:
- The IR is built by bakeoff itself (a normal ``api.run``), so it is exactly the
  IR bakeoff measures, not a hand-made look-alike.
- Drift: benchmark_app runs once before and once after the bakeoff measurement
  and the mean of its two medians is used. An IR must exist before the first
  benchmark_app run, so a short first bakeoff run builds it; the second bakeoff
  run is the measurement, and the two IRs are checked to be byte-identical.
  When the two benchmark_app medians disagree by more than 5% the machine changed
  speed mid-check (on a shared VM this happens with no other process in sight),
  and the script says so; the CPU time other processes used in each phase is
  printed too, to tell a busy neighbour process from that.
- Same settings: latency hint, f32 inference precision, one stream, the thread
  count bakeoff used, the same thread variables in the environment.
  benchmark_app refuses ``-nthreads``/``-nstreams`` together with ``-hint
  latency`` (a rule of its command line, not of OpenVINO), so the thread and
  stream counts go in through ``-load_config``.
- Same shape handling: bakeoff's IR has a dynamic batch axis and bakeoff compiles
  it as is, so benchmark_app gets ``-data_shape`` (not ``-shape``, which would
  reshape the model to static and compile a different graph).
- Same data: benchmark_app is fed the 16 real tokenized samples bakeoff cycles
  through (its timing pool), as .npy files, one request at a time (sync API).

Everything lives in a temporary directory. Run with
``python benchmarks/crosscheck.py`` from the project's virtual environment.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CANDIDATE = "openvino-fp32-b1"
INPUTS = ("input_ids", "attention_mask")
SEQUENCE_LENGTH = 128
POOL_SIZE = 16  # bakeoff's worker cycles through at most 16 distinct batches
DRIFT_LIMIT = 0.05  # benchmark_app's before/after medians should agree this well
SHOWN_PROPERTIES = (
    "PERFORMANCE_HINT",
    "INFERENCE_NUM_THREADS",
    "NUM_STREAMS",
    "INFERENCE_PRECISION_HINT",
    "ENABLE_CPU_PINNING",
    "ENABLE_HYPER_THREADING",
    "SCHEDULING_CORE_TYPE",
)


class OtherCpu:
    """CPU seconds used by processes other than this one and its children over a phase.

    Interference check: a timing phase on a quiet machine should show ~0 s here.
    Reads /proc/stat (Linux); elsewhere the figure is None.
    """

    def __enter__(self) -> OtherCpu:
        self.start = (self._busy(), self._ours())
        self.seconds: float | None = None
        return self

    def __exit__(self, *exc: object) -> None:
        busy, ours = self._busy(), self._ours()
        if busy is not None and self.start[0] is not None:
            self.seconds = max(0.0, (busy - self.start[0]) - (ours - self.start[1]))

    @staticmethod
    def _busy() -> float | None:
        try:
            fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _ours() -> float:
        total = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            r = resource.getrusage(who)
            total += r.ru_utime + r.ru_stime
        return total


def benchmark_app_command() -> list[str] | None:
    """How to start benchmark_app from this environment, or None when it is missing."""
    script = Path(sys.executable).parent / "benchmark_app"
    if script.is_file():
        return [str(script)]
    found = shutil.which("benchmark_app")
    if found:
        return [found]
    try:
        module = importlib.util.find_spec("openvino.tools.benchmark.main")
    except ModuleNotFoundError:  # openvino itself is missing
        module = None
    if module is not None:
        # The module has no __main__ guard, so `python -m` would not run it.
        code = "import sys; from openvino.tools.benchmark.main import main; sys.exit(main())"
        return [sys.executable, "-c", code]
    return None


def bakeoff_run(workdir: Path, budget_s: float) -> tuple[dict[str, Any], Path]:
    """One ordinary bakeoff run (openvino fp32, batch 1): its document and run folder."""
    from bakeoff import api

    store = workdir / "bakeoff.db"
    options = api.RunOptions(
        quick=True,
        runtimes=["openvino"],
        precisions=["fp32"],
        batch_sizes=[1],
        store=store,
        budget_s=budget_s,
    )
    result = api.run("builtin:minilm", options)
    return result.document, store.parent / "runs" / result.run_id


def candidate(document: dict[str, Any]) -> dict[str, Any]:
    for c in document["candidates"]:
        if c["id"] == CANDIDATE:
            if c["status"] != "ok" or not c["latency_ms"]:
                sys.exit(f"bakeoff did not measure {CANDIDATE}: {c['status']} {c['reason']}")
            return dict(c)
    sys.exit(f"bakeoff's document has no candidate {CANDIDATE}")


def ir_digest(xml: Path) -> str:
    h = hashlib.sha256()
    for part in (xml, xml.with_suffix(".bin")):
        h.update(part.read_bytes())
    return h.hexdigest()


def write_inputs(run_dir: Path, out: Path) -> list[str]:
    """The first samples of bakeoff's timing pool, one [1, 128] int64 .npy per sample.

    Returns benchmark_app's ``-i`` arguments (``name:file,file,...`` per input);
    file names are zero-padded because benchmark_app sorts them.
    """
    import numpy as np

    out.mkdir(parents=True, exist_ok=True)
    args = []
    with np.load(run_dir / "data.npz", allow_pickle=False) as z:
        for name in INPUTS:
            pool = z[f"pool/{name}"]
            files = []
            for i in range(min(POOL_SIZE, len(pool))):
                path = out / f"{name}-{i:02d}.npy"
                np.save(path, np.ascontiguousarray(pool[i : i + 1], dtype=np.int64))
                files.append(str(path))
            args.append(f"{name}:{','.join(files)}")
    return args


def run_benchmark_app(
    command: list[str],
    ir: Path,
    threads: int,
    input_args: list[str],
    seconds: int,
    out: Path,
) -> dict[str, Any]:
    """Time the IR with benchmark_app; return its median, mean, count and applied settings."""
    from bakeoff.trials.launcher import worker_env  # the environment bakeoff's workers get

    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.json"
    config.write_text(json.dumps({"CPU": {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1}}))
    shape = ",".join(f"{name}[1,{SEQUENCE_LENGTH}]" for name in INPUTS)
    argv = [
        *command,
        "-m", str(ir),
        "-d", "CPU",
        "-hint", "latency",
        "-api", "sync",
        "-infer_precision", "f32",
        "-load_config", str(config),
        "-data_shape", shape,
        "-i", *input_args,
        "-t", str(seconds),
        "-report_type", "no_counters",
        "-json_stats",
        "-report_folder", str(out),
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            argv,
            env=worker_env(threads),
            capture_output=True,
            text=True,
            timeout=seconds + 180,
            check=False,
        )
    except subprocess.TimeoutExpired:
        sys.exit(f"benchmark_app did not finish within {seconds + 180} s")
    (out / "stdout.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        sys.exit(f"benchmark_app failed (exit {proc.returncode}):\n{tail}")
    results = json.loads((out / "benchmark_report.json").read_text())["execution_results"]
    applied = {}
    for key in SHOWN_PROPERTIES:
        m = re.search(rf"^\[ INFO \]\s+{key}: (.*)$", proc.stdout, re.MULTILINE)
        if m:
            value = m.group(1).strip()
            applied[key] = "f32" if value == "<Type: 'float32'>" else value
    random_fill = "with random values" in proc.stdout
    return {
        "median_ms": float(results["latency (ms)"]),
        "mean_ms": float(results["avg latency"]),
        "iterations": int(results["total number of iterations"]),
        "applied": applied,
        "inputs": "random" if random_fill else "real (bakeoff's timing pool)",
    }


def fmt_s(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=15, help="benchmark_app time per run")
    parser.add_argument("--budget", type=float, default=20.0, help="bakeoff measuring budget, s")
    args = parser.parse_args()

    command = benchmark_app_command()
    if command is None:
        sys.exit(
            f"benchmark_app is not available: neither {Path(sys.executable).parent}/benchmark_app "
            "nor the module openvino.tools.benchmark.main was found (pip install openvino)"
        )
    if importlib.util.find_spec("bakeoff") is None:
        sys.exit("bakeoff is not importable: run this with the project's virtual environment")

    load = os.getloadavg()[0]
    if load > 0.8:
        print(f"warning: 1-minute load average is {load:.2f}; timings may be disturbed")
    with tempfile.TemporaryDirectory(prefix="bakeoff-crosscheck-") as tmp:
        work = Path(tmp)
        print("building the IR with a short bakeoff run ...", flush=True)
        doc0, run0 = bakeoff_run(work / "build", budget_s=2.0)
        ir0 = run0 / "artifacts" / "ov-fp32" / "model.xml"
        threads = int(doc0["settings"]["threads"])

        def time_with_benchmark_app(ir: Path, run: Path, label: str) -> dict[str, Any]:
            inputs = write_inputs(run, work / f"inputs-{label}")
            with OtherCpu() as other:
                b = run_benchmark_app(
                    command, ir, threads, inputs, args.seconds, work / f"ba-{label}"
                )
            b["other_cpu_s"] = other.seconds
            print(f"benchmark_app ({label}): median {b['median_ms']:.2f} ms", flush=True)
            return b

        bench = {"before": time_with_benchmark_app(ir0, run0, "before")}

        print("bakeoff measurement ...", flush=True)
        with OtherCpu() as other_bakeoff:
            doc, run_dir = bakeoff_run(work / "measure", budget_s=args.budget)
        ir = run_dir / "artifacts" / "ov-fp32" / "model.xml"
        cand = candidate(doc)
        same_ir = ir_digest(ir) == ir_digest(ir0)
        bench["after"] = time_with_benchmark_app(ir, run_dir, "after")

        lat = cand["latency_ms"]
        bakeoff_median = float(lat["p50"])
        ba_median = (bench["before"]["median_ms"] + bench["after"]["median_ms"]) / 2
        settings = cand["settings"] or {}
        print()
        print(f"IR: {ir}")
        print(f"    (byte-identical to the IR timed before: {'yes' if same_ir else 'NO'})")
        print(
            f"bakeoff {CANDIDATE}: median {bakeoff_median:.3f} ms "
            f"(95% CI {lat['ci95']['p50'][0]:.3f}-{lat['ci95']['p50'][1]:.3f}, "
            f"n={lat['n']} in {lat['rounds']} rounds, cv {lat['cv']}); "
            f"build run's median {candidate(doc0)['latency_ms']['p50']:.3f} ms"
        )
        print(
            "  settings: threads="
            f"{doc['settings']['threads']} "
            + " ".join(f"{k}={settings.get(k)}" for k in SHOWN_PROPERTIES[:4])
        )
        for label, b in bench.items():
            print(
                f"benchmark_app ({label}): median {b['median_ms']:.2f} ms, "
                f"mean {b['mean_ms']:.2f} ms, {b['iterations']} iterations, {b['inputs']} inputs"
            )
            print("  settings: " + " ".join(f"{k}={v}" for k, v in b["applied"].items()))
        print("CPU seconds used by other processes during each phase (quiet machine: ~0):")
        print(
            f"  benchmark_app before {fmt_s(bench['before']['other_cpu_s'])}, "
            f"bakeoff run {fmt_s(other_bakeoff.seconds)}, "
            f"benchmark_app after {fmt_s(bench['after']['other_cpu_s'])}"
        )
        before, after = bench["before"]["median_ms"], bench["after"]["median_ms"]
        print(
            f"benchmark_app mean of the two medians: {ba_median:.3f} ms "
            f"(ratio against each alone: {bakeoff_median / before:.2f} before, "
            f"{bakeoff_median / after:.2f} after)"
        )
        drift = abs(before - after) / min(before, after)
        if drift > DRIFT_LIMIT:
            print(
                f"warning: benchmark_app's two medians differ by {drift:.0%}: the machine's speed "
                "changed during the check, so the ratio below mixes two states; rerun it"
            )
        print(
            f"ratio bakeoff/benchmark_app median: {bakeoff_median / ba_median:.2f} (target 0.9-1.1)"
        )


if __name__ == "__main__":
    main()
