"""JAX's platform and CPU threads for this process, set before jax is first
imported (JAX reads them then): for the JAX runtimes and the JAX training stacks."""

from __future__ import annotations

import os
from typing import Any


def set_platform(platform: str, threads: int) -> dict[str, Any]:
    """JAX reads these when it is first imported, so they are set before that."""
    os.environ["JAX_PLATFORMS"] = platform
    applied: dict[str, Any] = {"jax_platforms": platform}
    if platform == "cpu" and threads == 1:
        # XLA:CPU has no thread-count setting beyond on/off: one thread means
        # no Eigen pool and no intra-op parallelism.
        flags = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()
        applied["threads"] = 1
    elif platform == "cpu":
        applied["threads"] = "XLA's own pool, sized by the CPUs the worker is pinned to"
    applied["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    return applied
