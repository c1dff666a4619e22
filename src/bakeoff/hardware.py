"""What this CPU can do natively, read from /proc/cpuinfo (no runtime imported).

The flags order candidates, annotate them and explain expectations; they never
remove a precision that a runtime executes on this CPU (only measuring says
whether it pays). A precision without native arithmetic is built when asked
for, with a note that it is emulated (`emulation_note`).

`BAKEOFF_CPU_FLAGS` replaces the detected flags (comma- or space-separated
/proc/cpuinfo names, e.g. ``avx2`` or ``avx2,avx512f,avx512_vnni,avx512_bf16``),
so the advice and every rule here can be tried for any CPU on any machine. The
runtimes themselves still run on the real CPU; the environment fingerprint
records both sets of flags when the override is set. `BAKEOFF_CPU_VENDOR`
(intel, amd or hygon) replaces the detected vendor the same way, for the
advice's wording.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from pathlib import Path

from bakeoff.errors import UserError

FLAGS_VARIABLE = "BAKEOFF_CPU_FLAGS"
# Replaces the vendor read from /proc/cpuinfo, for the advice's wording ("intel", "amd").
VENDOR_VARIABLE = "BAKEOFF_CPU_VENDOR"

# /proc/cpuinfo's vendor_id -> the name the advice uses.
VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "HygonGenuine": "Hygon"}

# The one table of CPU flags (this and NATIVE below): the advice, the notes, the
# fingerprint and `bakeoff env` read it. The flags shown, in the order they are shown;
# every flag of NATIVE is among them.
NOTABLE_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "amx_int8",
    "avx512_bf16",
    "amx_bf16",
    "avx512_fp16",
    "amx_fp16",
)

# Any one of these flags gives native arithmetic for the precision on x86.
NATIVE = {
    "bf16": ("avx512_bf16", "amx_bf16"),
    "fp16": ("avx512_fp16", "amx_fp16"),
    "int8": ("avx512_vnni", "avx_vnni", "amx_int8"),
}

_FLAG_NAME = re.compile(r"^[a-z0-9_]+$")


@functools.cache
def detected_cpu_flags() -> frozenset[str]:
    """Every flag of /proc/cpuinfo's first CPU (empty where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


@functools.cache
def detected_cpu_vendor() -> str:
    """Intel, AMD, Hygon, another vendor_id as it is, or "unknown" (not x86, or no
    /proc/cpuinfo)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "vendor_id":
                return VENDORS.get(value.strip(), value.strip() or "unknown")
    except OSError:
        pass
    return "unknown"


def cpu_vendor() -> str:
    """The vendor every piece of advice names: `BAKEOFF_CPU_VENDOR` where set
    (read on every call, like the flags), else the detected one."""
    raw = os.environ.get(VENDOR_VARIABLE)
    if raw is None:
        return detected_cpu_vendor()
    names = {v.lower(): v for v in VENDORS.values()}
    if raw.strip().lower() not in names:
        raise UserError(f"{VENDOR_VARIABLE}={raw!r}: expected one of {', '.join(sorted(names))}")
    return names[raw.strip().lower()]


def simulated_cpu_flags() -> frozenset[str] | None:
    """The flags `BAKEOFF_CPU_FLAGS` sets, or None when it is not set.

    Read on every call (not cached), so a test can set it for one case. An empty
    value simulates an x86 CPU with none of the notable flags.
    """
    raw = os.environ.get(FLAGS_VARIABLE)
    if raw is None:
        return None
    names = [n.strip().lower() for n in re.split(r"[,\s]+", raw) if n.strip()]
    bad = [n for n in names if not _FLAG_NAME.match(n)]
    if bad:
        raise UserError(
            f"{FLAGS_VARIABLE}={raw!r}: {', '.join(map(repr, bad))} is not a CPU flag name "
            "(expected /proc/cpuinfo names such as avx2, avx512_vnni, amx_int8)"
        )
    return frozenset(names)


def cpu_flags() -> frozenset[str]:
    """The flags every rule reads: the simulated ones where set, else the detected."""
    simulated = simulated_cpu_flags()
    return detected_cpu_flags() if simulated is None else simulated


def is_x86() -> bool:
    """x86-64 flags apply: this machine is one, or flags of one are simulated."""
    return platform.machine() in ("x86_64", "AMD64") or simulated_cpu_flags() is not None


def native_flags(precision: str) -> tuple[str, ...]:
    """The flags this CPU has that give `precision` native arithmetic."""
    flags = cpu_flags()
    return tuple(f for f in NATIVE.get(precision, ()) if f in flags)


def emulation_note(precision: str) -> str | None:
    """Why a precision may run slower than expected here, or None when it is native.

    None also for fp32, int4 weight-only (computed in int8/fp32 kernels) and for
    CPUs other than x86, which report their own features: the runtime decides
    there, and the measurement says what it costs.
    """
    wanted = NATIVE.get(precision)
    if wanted is None or not is_x86() or native_flags(precision):
        return None
    if precision == "int8":
        if "avx2" in cpu_flags():
            return (
                f"int8 runs through 16-bit multiply-adds on this CPU (AVX2, none of "
                f"{'/'.join(wanted)}): it may or may not beat fp32 here"
            )
        return f"int8 has neither {'/'.join(wanted)} nor AVX2 on this CPU: it is emulated"
    return f"{precision} is emulated on this CPU (no {'/'.join(wanted)})"


def int8_path() -> str:
    """How this CPU computes INT8 dot products: "amx", "vnni", "avx2", "none" (x86
    without AVX2) or "other" (not x86: the runtime's own kernels)."""
    if not is_x86():
        return "other"
    flags = cpu_flags()
    native = set(NATIVE["int8"]) & flags  # AMX-INT8, else a VNNI flavour
    if "amx_int8" in native:
        return "amx"
    if native:
        return "vnni"
    return "avx2" if "avx2" in flags else "none"


# A Ray node that bakeoff measures on carries the custom resource `bakeoff_node`;
# a simulated node (`--cluster local:N`) also carries its share of this machine's
# cores as a resource `bakeoff_cores:<first>-<last>`, since Ray's CPU counts are
# bookkeeping, not isolation: what runs on the node pins itself to those cores.
NODE_RESOURCE = "bakeoff_node"
CORES_PREFIX = "bakeoff_cores:"


def cores_resource(cores: tuple[int, ...]) -> str:
    """The resource that names a simulated node's cores (a contiguous range)."""
    return f"{CORES_PREFIX}{cores[0]}-{cores[-1]}"


def resource_cores(resources: dict[str, float]) -> tuple[int, ...] | None:
    """The cores a node's resources name, or None: all of the node's own."""
    for key in resources:
        if key.startswith(CORES_PREFIX):
            first, last = key.removeprefix(CORES_PREFIX).split("-")
            return tuple(range(int(first), int(last) + 1))
    return None
