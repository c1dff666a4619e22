"""The hardware/software fingerprint stored with every run (docs/method.md rule 13)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

import bakeoff
from bakeoff import hardware
from bakeoff.backends import get_backend, runtime_names, runtime_origin
from bakeoff.backends.gpu import gpu_info
from bakeoff.errors import UserError

_PACKAGES = (
    "torch",
    "onnx",
    "onnxscript",
    "onnxruntime",
    "openvino",
    "nncf",
    "transformers",
    "numpy",
    "scikit-learn",
    "tensorflow-cpu",
    "tensorflow",
    "jax",
    "jaxlib",
    "flax",
    "keras",
    "ai-edge-litert",
    "apache-tvm",
    "onnxruntime-gpu",
    "tensorrt",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_info() -> dict[str, Any]:
    freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
    flags = hardware.cpu_flags()
    info: dict[str, Any] = {
        "model": _cpu_model(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "flags": [f for f in hardware.NOTABLE_FLAGS if f in flags],
        "frequency_mhz": round(freq.current) if freq else None,
    }
    info["vendor"] = hardware.cpu_vendor()
    if hardware.VENDOR_VARIABLE in os.environ:
        info["vendor_simulated"] = os.environ[hardware.VENDOR_VARIABLE]
        info["detected_vendor"] = hardware.detected_cpu_vendor()
    if hardware.simulated_cpu_flags() is not None:
        # The advice and notes followed simulated flags; the runtimes ran on these.
        detected = hardware.detected_cpu_flags()
        info["flags_simulated"] = os.environ[hardware.FLAGS_VARIABLE]
        info["detected_flags"] = [f for f in hardware.NOTABLE_FLAGS if f in detected]
    return info


def physical_cores() -> int:
    """This machine's physical cores (logical ones where psutil cannot tell)."""
    return psutil.cpu_count(logical=False) or psutil.cpu_count() or 1


def default_threads() -> int:
    """Physical cores we may run on: the same explicit count for every runtime."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    physical = psutil.cpu_count(logical=False) or allowed or 1
    return max(1, min(physical, allowed or physical))


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def package_changes(then: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """ "name old -> new" for each package whose version differs between two
    fingerprints (what a resumed run would measure with against what it had)."""
    old, new = then.get("packages") or {}, now.get("packages") or {}
    return [
        f"{name} {old.get(name)} -> {new.get(name)}"
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    ]


def check_same_packages(record: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse to resume the stored run `record` where an installed library's version
    changed since it started: what it finished was measured with the old one."""
    changed = package_changes(record["environment"], now)
    if changed:
        raise UserError(
            f"installed libraries changed since run {record['run_id']} started "
            f"({'; '.join(changed)}): what it finished was measured with the old versions; "
            "reinstall those to resume, or start a new run"
        )


def runtimes() -> list[dict[str, Any]]:
    """Every runtime of the registry (built-in and registered through an entry point),
    with whether it can run here; `origin` says where a registered one comes from."""
    rows = []
    for name in runtime_names():
        a = get_backend(name).availability()
        rows.append(
            {
                "runtime": name,
                "available": a.available,
                "version": a.version,
                "reason": a.reason,
                "install": a.install,
                "origin": runtime_origin(name),
            }
        )
    return rows


def training_stacks() -> list[dict[str, Any]]:
    """Every training stack, with whether its framework is installed here and its
    version; nothing is imported (a stack's run checks the rest: gloo, the twin of
    the recipe's model)."""
    import importlib.metadata

    from bakeoff import stacks

    rows = []
    for info in stacks.STACKS:
        try:
            version = f"{info.package} {importlib.metadata.version(info.package)}"
        except importlib.metadata.PackageNotFoundError:
            version = None
        reason = stacks.availability(info.name, probe=False)
        rows.append(
            {
                "stack": info.name,
                "available": reason is None,
                "version": version,
                "reason": reason,
                "what": info.description,
            }
        )
    return rows


def generative_runtimes() -> list[dict[str, Any]]:
    """Every runtime of the generative bake-off, with its packages' versions and the
    Python environment that runs it, or why it cannot run here and how to install
    it; nothing is imported."""
    import importlib.metadata

    from bakeoff import generators, runtime_envs

    dists = importlib.metadata.packages_distributions()
    rows = []
    for runtime in [*generators.RUNTIMES, *generators.NOT_YET]:
        packages = generators.RUNTIMES[runtime][1] if runtime in generators.RUNTIMES else ()
        reason = generators.availability(runtime)
        environment = sys.prefix if reason is None else None
        found: list[str] = []
        if runtime in runtime_envs.OWN:
            # its workers' environment, and versions read from that one's metadata
            own = runtime_envs.python_for(runtime)
            if reason is None and own is not None:
                environment = str(own.parent.parent)
                found = [v for p in packages if (v := runtime_envs.version(runtime, p))]
            packages = ()
        for module in packages:
            # the distribution named as the module first (mlx before its mlx-cpu backend)
            named = sorted(dists.get(module, []), key=lambda d: d.replace("-", "_") != module)
            for dist in named[:1]:
                found.append(f"{dist} {importlib.metadata.version(dist)}")
        row = {
            "runtime": runtime,
            "available": reason is None,
            "version": ", ".join(found) or None,
            # the Python environment its workers run in
            "environment": environment,
            "reason": reason,
        }
        if runtime == "llama-cpp":  # its server, which the server scenario goes through
            from bakeoff.generators import llama_server

            row["server"] = llama_server.describe()
        rows.append(row)
    return rows


def fingerprint() -> dict[str, Any]:
    mem = psutil.virtual_memory()
    return {
        "bakeoff_version": bakeoff.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_info(),
        "memory_gb": round(mem.total / 2**30, 1),
        # Every NVIDIA GPU's model, driver and memory (nvidia-smi); None without one.
        "gpu": gpu_info() or None,
        "load_average": _load_average(),
        "packages": versions(),
    }


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, to the hundredth (what a reader can use)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def noise_snapshot(sample_s: float = 0.2) -> dict[str, Any]:
    """Load, CPU frequency and other busy processes right now (docs/method.md rule 10).

    Taken before and after measuring, so a reader can tell a quiet machine from
    one where something else was running.
    """
    me = os.getpid()
    procs = []
    for p in psutil.process_iter(["pid", "name"]):
        try:
            p.cpu_percent(None)  # the first call only starts the measurement
            procs.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    time.sleep(sample_s)
    busy = []
    for p in procs:
        try:
            pct = p.cpu_percent(None)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if pct >= 5.0 and p.pid != me:
            busy.append({"pid": p.pid, "name": p.info["name"], "cpu_percent": round(pct, 1)})
    busy.sort(key=lambda b: -b["cpu_percent"])
    freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
    return {
        "load_average": _load_average(),
        "cpu_frequency_mhz": round(freq.current) if freq else None,
        "busy_processes": busy[:10],
    }


@dataclass(frozen=True)
class CpuSample:
    """Where the machine's CPU time stood at one moment (for `other_cpu`)."""

    wall_s: float
    busy_s: float  # every CPU's busy time since boot, stolen time included
    steal_s: float  # time the hypervisor gave our virtual CPUs to someone else
    ours_s: dict[int, float]  # CPU time of bakeoff and each of its child processes, by pid


def cpu_sample() -> CpuSample:
    t = psutil.cpu_times()
    fields = t._asdict()
    # Guest time is already inside user time; idle and iowait are not busy.
    not_busy = ("idle", "iowait", "guest", "guest_nice")
    busy = sum(v for k, v in fields.items() if k not in not_busy)
    me = psutil.Process()
    ours = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            pt = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        ours[p.pid] = pt.user + pt.system
    return CpuSample(time.perf_counter(), busy, fields.get("steal", 0.0), ours)


def other_cpu(start: CpuSample, end: CpuSample) -> dict[str, float]:
    """Cores' worth of CPU that anything but bakeoff used between two samples.

    Measuring is meant to have the machine to itself; a build, a browser tab or
    a noisy neighbour on the host shows up here (docs/method.md rule 10: noise during a run,
    not only before and after it). A child that ended between the samples is
    counted as other, so the figure errs towards "busy".
    """
    wall = max(end.wall_s - start.wall_s, 1e-9)
    ours = sum(v - start.ours_s.get(pid, 0.0) for pid, v in end.ours_s.items())
    other = max(0.0, end.busy_s - start.busy_s - ours)
    return {
        "seconds": round(wall, 3),
        "other_cores": round(other / wall, 3),
        "steal_cores": round(max(0.0, end.steal_s - start.steal_s) / wall, 3),
    }
