"""The hardware/software fingerprint stored with every run (rule 13)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any

import psutil

import bakeoff
from bakeoff.backends import BUILTIN_BACKENDS, get_backend

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
)
_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")


def _cpu_info() -> dict[str, Any]:
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
    return {
        "model": model,
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "flags": [f for f in _CPU_FLAGS if f in flags],
        "frequency_mhz": round(freq.current) if freq else None,
    }


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


def runtimes() -> list[dict[str, Any]]:
    rows = []
    for name in BUILTIN_BACKENDS:
        a = get_backend(name).availability()
        rows.append(
            {
                "runtime": name,
                "available": a.available,
                "version": a.version,
                "reason": a.reason,
                "install": a.install,
            }
        )
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
        "gpu": None,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "packages": versions(),
    }
