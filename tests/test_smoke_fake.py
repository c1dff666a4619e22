from pathlib import Path

import numpy as np
import psutil

from bakeoff import api


def test_fake_workload_end_to_end(tmp_path: Path, store_path: Path) -> None:
    np.savez(tmp_path / "d.npz", input=np.random.default_rng(0).random((64, 8), dtype=np.float32))
    (tmp_path / "w.toml").write_text(
        'name = "fake"\n[model]\nkind = "fake"\n'
        "options = { latency_ms = { fp32 = 2.0, int8 = 1.0 } }\n"
        '[data]\npath = "d.npz"\n[search]\nruntimes = ["fake"]\n'
    )
    result = api.run(str(tmp_path / "w.toml"), api.RunOptions(quick=True, store=store_path))
    assert result.exit_code == 0
    assert [v["winner"] for v in result.document["verdicts"]] == ["fake-int8-b1", "fake-int8-b32"]
    # Every variant's build is recorded (wall and CPU seconds, its threads); after the
    # reference, the others were built side by side, as many as the cores allow.
    cache = result.document["variant_cache"]
    assert set(cache["builds"]) == {"fake-fp32", "fake-int8"}
    for build in cache["builds"].values():
        assert build["wall_s"] >= 0 and build["cpu_s"] >= 0 and build["threads"] >= 1
    threads = result.document["settings"]["threads"]
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    assert cache["side_by_side"] == max(1, min(cores, threads, 1))  # one variant after it
    # No FLOPs to count on a fake model: no peak measured, no efficiency claimed.
    assert "efficiency" in result.document["timing_s"]
    assert "peak_gflops" not in result.document["environment"]
    assert all(c["efficiency"] is None for c in result.document["candidates"])
