"""What this CPU can run natively, read from /proc/cpuinfo (no runtime imported).

Backends ask `precision_unsupported` before offering FP16/BF16/INT8 variants, so
a precision the hardware would only emulate is `unavailable` with the reason
instead of a slow candidate that looks like a runtime's fault.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path


@functools.cache
def cpu_flags() -> frozenset[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


# Any one of these flags gives native arithmetic for the precision on x86.
_NATIVE = {
    "bf16": ("avx512_bf16", "amx_bf16"),
    "fp16": ("avx512_fp16", "amx_fp16"),
    "int8": ("avx512_vnni", "avx_vnni", "amx_int8"),
}


def precision_unsupported(precision: str) -> str | None:
    """None when `precision` runs natively here, else the reason it does not."""
    wanted = _NATIVE.get(precision)
    if wanted is None:
        return None  # fp32, and int4 weight-only (computed in int8/fp32 kernels)
    if platform.machine() not in ("x86_64", "AMD64"):
        return None  # ARM reports its own features; the runtime decides there
    if cpu_flags() & set(wanted):
        return None
    return f"this CPU has no native {precision} arithmetic (none of {', '.join(wanted)})"
