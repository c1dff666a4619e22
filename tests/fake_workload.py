"""Workloads on the fake runtime, for the engine, statistics, verdict and printing
tests: 64 random 8-wide inputs, FP32 at 2 ms and INT8 at 1 ms a call
(`write_fake_workload`), or hand-written candidates for the racing tests
(`race_workload`)."""

from __future__ import annotations

import textwrap
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


def race_workload(
    tmp_path: Path, candidates: str, model_options: str = "{}", extra: str = ""
) -> Path:
    if not (tmp_path / "d.npz").exists():
        rng = np.random.default_rng(0)
        np.savez(tmp_path / "d.npz", input=rng.random((64, 8), dtype=np.float32))
    path = tmp_path / "w.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            name = "fake-race"
            [model]
            kind = "fake"
            options = {model_options}
            [data]
            path = "d.npz"
            [search]
            runtimes = ["fake"]
            batch_sizes = [1]
            {extra}
            """
        )
        + textwrap.dedent(candidates)
    )
    return path
