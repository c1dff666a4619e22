"""How close to the limit: the FLOPs a sample costs, this machine's GEMM peak, and the
fraction of that peak a candidate reaches at its measured throughput.

- `flops_per_sample` (in `bakeoff.flops`) counts the multiply-adds of the model's
  ONNX graph.
- `measure_peak` times a large square GEMM in a fresh process with the run's
  thread settings: FP32 always, INT8 where the CPU has an INT8 dot-product
  instruction (VNNI, AMX-INT8), BF16 where it has native BF16. `PeakProbe` starts
  that process ahead of time: it imports torch while other work runs and times
  nothing until `measure` is called.
- `efficiency` turns a count, a throughput and a peak into the candidate document's
  `efficiency` figure.

torch is imported inside the functions (in the peak's own process).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import Collection, Mapping
from typing import Any

from bakeoff import hardware

log = logging.getLogger(__name__)

# Long enough for torch's import and three GEMMs on a slow, busy machine; a hung
# child must not hold the run.
PEAK_TIMEOUT_S = 180.0
# Each GEMM is called at least this often and for at least this long; the best call
# counts (the peak, not the mean: anything else that ran only slows some calls down).
PEAK_MIN_CALLS = 5
PEAK_MIN_S = 0.5
# BAKEOFF_GEMM_PEAK=off: no GEMM peak is measured (each precision's figure is null
# with this reason, and no candidate gets an efficiency); for runs where the
# figure is not wanted, such as a test suite's many short runs, each of which
# would pay about 4 s of CPU for the probe's torch import and its GEMMs.
PEAK_VARIABLE = "BAKEOFF_GEMM_PEAK"
_OFF = ("off", "0", "no", "false")  # values of PEAK_VARIABLE that turn it off
# Thread settings the child sets when the caller passes no environment of its own
# (the run passes bakeoff.trials.launcher.worker_env(threads), which sets these too).
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


# ---------------------------------------------------------------- the peak


def measure_peak(
    threads: int,
    precisions: Collection[str],
    env: Mapping[str, str] | None = None,
    *,
    size: int | None = None,
    timeout_s: float = PEAK_TIMEOUT_S,
) -> dict[str, dict[str, Any]]:
    """This machine's GEMM peak at `threads` threads, per precision:
    {"fp32": {"gflops": 98.2, "how": "torch.matmul 2048x2048 fp32, 2 threads, best
    of 6 calls"}, "int8": {...} or {"gflops": None, "why": "..."}}.

    FP32 is always measured (the fallback peak of precisions without their own);
    INT8 when asked for and the CPU has an INT8 dot-product instruction, BF16 when
    asked for and native. The GEMMs run in a child process started with `env`
    (the run passes `worker_env(threads)`, what its workers get; None: this
    process's environment with the thread variables set), pinned where this process
    is; call it while nothing is being timed. `size` overrides the matrix size
    (tests use a small one).
    """
    return PeakProbe(threads, precisions, env, size=size).measure(timeout_s)


class PeakProbe:
    """The GEMM peak's child process (see `measure_peak`), started ahead of time:
    it imports torch and makes its matrices at once, beside whatever else runs,
    then waits; `measure` lets it time its GEMMs, which must be while nothing else
    runs. `close` stops a probe that is not needed after all."""

    def __init__(
        self,
        threads: int,
        precisions: Collection[str],
        env: Mapping[str, str] | None = None,
        *,
        size: int | None = None,
        skip_why: str | None = None,
    ) -> None:
        """`skip_why`: the peak is not wanted (said so in the results), and no
        process starts."""
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.kinds = ["fp32"]
        self.out: dict[str, dict[str, Any]] = {}
        wanted = set(precisions)
        if "int8" in wanted:
            path = hardware.int8_path()
            if path in ("amx", "vnni"):
                self.kinds.append("int8")
            else:
                self.out["int8"] = {"gflops": None, "why": _no_int8_why(path)}
        if "bf16" in wanted:
            if hardware.native_flags("bf16"):
                self.kinds.append("bf16")
            else:
                self.out["bf16"] = {
                    "gflops": None,
                    "why": "no native bf16 arithmetic on this CPU "
                    f"({'/'.join(hardware.NATIVE['bf16'])}): bf16 candidates are compared "
                    "with the fp32 peak",
                }
        self.proc: subprocess.Popen[str] | None = None
        if skip_why is None and os.environ.get(PEAK_VARIABLE, "").lower() in _OFF:
            skip_why = f"not measured: {PEAK_VARIABLE}={os.environ[PEAK_VARIABLE]}"
        if skip_why is not None:
            self.out.update({kind: {"gflops": None, "why": skip_why} for kind in self.kinds})
            self.kinds = []
            return
        # Large enough that the GEMM is compute-bound at this thread count: 2048 keeps
        # 8 cores busy for milliseconds per call, more cores get 4096.
        n = size or (2048 if threads <= 8 else 4096)
        spec = {"threads": threads, "kinds": self.kinds, "size": n}
        if env is None:
            child_env = dict(os.environ)
            child_env.update({name: str(threads) for name in _THREAD_VARIABLES})
        else:
            child_env = dict(env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bakeoff.efficiency", json.dumps(spec)],
            env=child_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def measure(self, timeout_s: float = PEAK_TIMEOUT_S) -> dict[str, dict[str, Any]]:
        """Time the GEMMs now (the child may still be importing: it starts when ready)."""
        measured = self._result(timeout_s) if self.kinds else {}
        out = dict(self.out)
        for kind in self.kinds:
            out[kind] = measured.get(kind) or {"gflops": None, "why": "not measured"}
        fp32, int8 = out["fp32"].get("gflops"), out.get("int8", {}).get("gflops")
        if fp32 and int8 is not None and int8 < 1.5 * fp32:
            # VNNI's 4-way int8 dot products give several times fp32's rate: a figure
            # below that is another path (oneDNN capped by ONEDNN_MAX_CPU_ISA, say).
            out["int8"]["note"] = (
                f"only {int8 / fp32:.1f}x the fp32 peak: the int8 GEMM may not be using "
                "the CPU's int8 dot-product instructions"
            )
        return {k: out[k] for k in ("fp32", "int8", "bf16") if k in out}

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
            self.proc.communicate(timeout=5)

    def _result(self, timeout_s: float) -> dict[str, dict[str, Any]]:
        failed = {kind: {"gflops": None, "why": ""} for kind in self.kinds}
        assert self.proc is not None  # started: there are kinds to measure
        try:
            stdout, stderr = self.proc.communicate(_GO + "\n", timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.close()
            why = f"the GEMM benchmark ran past {timeout_s:g} s"
            return {kind: {**v, "why": why} for kind, v in failed.items()}
        except (ValueError, OSError) as exc:  # measured or closed already
            why = f"the GEMM benchmark could not be asked: {exc}"
            return {kind: {**v, "why": why} for kind, v in failed.items()}
        lines = stdout.strip().splitlines()
        if self.proc.returncode != 0 or not lines:
            tail = " | ".join(stderr.strip().splitlines()[-2:])
            why = f"the GEMM benchmark exited with code {self.proc.returncode}: {tail}"
            return {kind: {**v, "why": why} for kind, v in failed.items()}
        try:
            result: dict[str, dict[str, Any]] = json.loads(lines[-1])
        except ValueError:
            why = f"the GEMM benchmark printed no result: {lines[-1][:200]!r}"
            return {kind: {**v, "why": why} for kind, v in failed.items()}
        return result


# What the parent writes to the child's stdin when it may time its GEMMs.
_GO = "go"


def _no_int8_why(path: str) -> str:
    wanted = "/".join(hardware.NATIVE["int8"])
    if path == "avx2":
        return (
            f"no int8 dot-product instructions on this CPU ({wanted}): int8 runs through "
            "AVX2's 16-bit multiply-adds, and no int8 peak is measured"
        )
    if path == "none":
        return f"neither {wanted} nor AVX2 on this CPU: int8 is emulated"
    return "not an x86 CPU: the int8 peak is measured only for VNNI and AMX"


def _peak_child(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """In the child: each GEMM's best call, as GFLOP/s, once the parent says go (torch
    is imported before that, while the parent's other work runs)."""
    import torch

    threads, n = int(spec["threads"]), int(spec["size"])
    torch.set_num_threads(threads)
    # One inter-op thread, as every runtime gets; it refuses once parallel work ran.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
    gen = torch.Generator().manual_seed(0)
    if sys.stdin.readline().strip() != _GO:
        return {}  # the parent closed it, or is gone: nothing to time for anyone
    plural = "" if threads == 1 else "s"
    out: dict[str, dict[str, Any]] = {}
    for kind in spec["kinds"]:
        if kind == "int8":
            a = torch.randint(-128, 128, (n, n), dtype=torch.int8, generator=gen)
            b = torch.randint(-128, 128, (n, n), dtype=torch.int8, generator=gen)
            c = torch.empty(n, n, dtype=torch.int32)
            # oneDNN's s8 x s8 -> s32 GEMM: on a VNNI or AMX CPU, its int8 path.
            what = f"torch._int_mm (oneDNN, s32 accumulate) {n}x{n} int8"
            call = functools.partial(torch._int_mm, a, b, out=c)
        else:
            dtype = torch.bfloat16 if kind == "bf16" else torch.float32
            a = torch.randn(n, n, generator=gen).to(dtype)
            b = torch.randn(n, n, generator=gen).to(dtype)
            c = torch.empty(n, n, dtype=dtype)
            what = f"torch.matmul {n}x{n} {kind}"
            call = functools.partial(torch.matmul, a, b, out=c)
        try:
            best, calls = _best_call(call)
        except Exception as exc:  # a torch build without this GEMM on this CPU
            out[kind] = {"gflops": None, "why": f"{what} failed: {type(exc).__name__}: {exc}"}
            continue
        out[kind] = {
            "gflops": round(2 * n**3 / best / 1e9, 2),
            "how": f"{what}, {threads} thread{plural}, best of {calls} calls",
        }
    return out


def _best_call(call: Any) -> tuple[float, int]:
    call()  # the first call creates oneDNN's primitive and touches the memory
    best, calls, started = math.inf, 0, time.perf_counter()
    while calls < PEAK_MIN_CALLS or time.perf_counter() - started < PEAK_MIN_S:
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
        calls += 1
    return best, calls


# ---------------------------------------------------------------- the fraction


def peak_for(peaks: Mapping[str, Any] | None, precision: str) -> float | None:
    """The peak a candidate of `precision` is measured against: its own where
    measured (int8, bf16), else fp32 for the float precisions; None for int8
    without a measured peak and for int4 (weight-only: its kernels mix int8 and
    fp32, so no one GEMM is its limit)."""
    if not peaks:
        return None
    own = (peaks.get(precision) or {}).get("gflops")
    if own:
        return float(own)
    if precision in ("fp32", "bf16", "fp16"):
        fp32 = (peaks.get("fp32") or {}).get("gflops")
        return float(fp32) if fp32 else None
    return None


def efficiency(flops_per_sample: int, samples_per_s: float, peak_gflops: float) -> dict[str, Any]:
    """The candidate document's `efficiency`: {"flops_per_sample", "achieved_gflops",
    "peak_gflops", "fraction"} (fraction of the peak, 0.12 for 12%)."""
    if flops_per_sample <= 0 or samples_per_s < 0 or peak_gflops <= 0:
        raise ValueError(
            f"efficiency needs positive figures: {flops_per_sample} FLOPs, "
            f"{samples_per_s} samples/s, {peak_gflops} GFLOP/s peak"
        )
    achieved = flops_per_sample * samples_per_s / 1e9
    return {
        "flops_per_sample": int(flops_per_sample),
        "achieved_gflops": _sig(achieved),
        "peak_gflops": _sig(peak_gflops),
        "fraction": _sig(achieved / peak_gflops),
    }


def candidate_efficiency(
    flops: int | None,
    samples_per_s: float | None,
    peaks: Mapping[str, Any] | None,
    precision: str,
) -> dict[str, Any] | None:
    """`efficiency` for a candidate, or None where a figure is missing (no count, not
    measured, no peak for its precision)."""
    peak = peak_for(peaks, precision)
    if not flops or samples_per_s is None or peak is None:
        return None
    return efficiency(flops, samples_per_s, peak)


def percent(fraction: float) -> str:
    """A fraction of the peak as the reports print it: "12%", "3.4%", "0.12%"."""
    pct = fraction * 100
    if pct >= 10 or pct == 0:
        return f"{pct:.0f}%"
    return f"{pct:.2g}%"


def _sig(x: float) -> float:
    """Four significant figures: a tiny model's 0.0004 GFLOP/s is not 0.0."""
    return float(f"{x:.4g}")


if __name__ == "__main__":
    print(json.dumps(_peak_child(json.loads(sys.argv[1]))))
