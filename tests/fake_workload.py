"""A workload on the fake runtime, for the engine, statistics, verdict and printing
tests: 64 random 8-wide inputs, FP32 at 2 ms and INT8 at 1 ms a call."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_fake_workload(folder: Path, name: str, more: str = "") -> Path:
    """`folder`/w.toml (and its d.npz), with `more` TOML after the [data] table."""
    np.savez(folder / "d.npz", input=np.random.default_rng(0).random((64, 8), dtype=np.float32))
    path = folder / "w.toml"
    path.write_text(
        f'name = "{name}"\n[model]\nkind = "fake"\n'
        "options = { latency_ms = { fp32 = 2.0, int8 = 1.0 } }\n"
        '[data]\npath = "d.npz"\n' + more
    )
    return path
