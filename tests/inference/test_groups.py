import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from rich.console import Console

from bakeoff import api
from bakeoff.report.terminal import print_result


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
    # reference's build, its outputs and the other builds ran side by side, as many
    # as the cores allow.
    cache = result.document["variant_cache"]
    assert set(cache["builds"]) == {"fake-fp32", "fake-int8"}
    for build in cache["builds"].values():
        assert build["wall_s"] >= 0 and build["cpu_s"] >= 0 and build["threads"] >= 1
    threads = result.document["settings"]["threads"]
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    assert cache["side_by_side"] == max(1, min(cores, threads, 2))  # outputs + a variant
    assert result.document["timing_s"]["reference_beside_builds"] is True
    # One worker per variant, timed at batch 1, then 32: its quality pass ran once, at
    # 32; at 32 its first call came after batch 1's, so that is no cold start.
    by_id = {c["id"]: c for c in result.document["candidates"]}
    loaded_alone = cores == 1
    for vid in ("fake-fp32", "fake-int8"):
        small, large = by_id[f"{vid}-b1"], by_id[f"{vid}-b32"]
        for c in (small, large):
            assert c["worker"]["batch_sizes"] == [1, 32]
            assert c["worker"]["quality_batch_size"] == 32
            assert c["worker"]["loaded_alone"] is loaded_alone
        assert small["worker"]["first_call"] == "cold"
        assert large["worker"]["first_call"] == "after batch size 1"
        assert small["cold_start_s"]["isolated"] is loaded_alone
        assert large["cold_start_s"]["isolated"] is False
        assert "after batch size 1" in large["cold_start_s"]["not_isolated"]
        assert large["cold_start_s"]["load"] == small["cold_start_s"]["load"]  # one load
    # The table marks those figures, and says why and how to get isolated ones.
    console = Console(record=True, width=220)
    print_result(result.document, console)
    text = console.export_text()
    assert "†" in text and "no cold start measured alone" in text
    assert "--worker-per-batch-size" in text
    # No FLOPs to count on a fake model: no peak measured, no efficiency claimed.
    assert "efficiency" in result.document["timing_s"]
    assert "peak_gflops" not in result.document["environment"]
    assert all(c["efficiency"] is None for c in result.document["candidates"])


def _two_batch_sizes(
    folder: Path, precisions: str = '"fp32"', model: str = "", **options: Any
) -> dict[str, Any]:
    """A fake run at batch sizes 1 and 8; its document."""
    folder.mkdir()
    np.savez(folder / "d.npz", input=np.random.default_rng(0).random((64, 8), dtype=np.float32))
    (folder / "w.toml").write_text(
        'name = "fake"\n[model]\nkind = "fake"\n'
        f"options = {{ latency_ms = {{ fp32 = 2.0, int8 = 1.0 }}{model} }}\n"
        '[data]\npath = "d.npz"\n[search]\nruntimes = ["fake"]\n'
        f"precisions = [{precisions}]\nbatch_sizes = [1, 8]\n"
    )
    opts = api.RunOptions(quick=True, store=folder / "s.db", **options)
    result = api.run(str(folder / "w.toml"), opts)
    assert result.exit_code == 0
    return result.document


def test_a_worker_per_batch_size_when_cold_starts_must_be_alone(tmp_path: Path) -> None:
    """--worker-per-batch-size, or a cold-start limit: each candidate is loaded alone
    in a worker of its own, checked at its own batch size, its cold start isolated."""
    for n, options in enumerate(
        ({"worker_per_batch_size": True}, {"constraints": {"max_cold_start_s": 60.0}})
    ):
        doc = _two_batch_sizes(tmp_path / str(n), **options)
        cands = {c["id"]: c for c in doc["candidates"]}
        for bs in (1, 8):
            c = cands[f"fake-fp32-b{bs}"]
            assert c["status"] == "ok", c["reason"]
            assert "batch_sizes" not in c["worker"], options
            assert c["worker"]["quality_batch_size"] == bs
            assert c["worker"]["loaded_alone"] is True
            assert c["cold_start_s"]["isolated"] is True


def test_a_reference_that_fails_stops_the_builds_beside_it(
    tmp_path: Path, store_path: Path
) -> None:
    """The reference's outputs are computed beside the other builds; when the
    reference cannot run the model, the build still in flight is stopped at once,
    not waited for, and the run ends with the reference's error."""
    from bakeoff.errors import BakeoffError

    np.savez(tmp_path / "d.npz", input=np.zeros((64, 8), np.float32))
    (tmp_path / "w.toml").write_text(
        'name = "fake"\n[model]\nkind = "fake"\n'
        'options = { load_error = { fp32 = "the reference cannot read this" }, '
        "build_wall_s = { int8 = 120.0 } }\n"
        '[data]\npath = "d.npz"\n[search]\nruntimes = ["fake"]\n'
    )
    started = time.monotonic()
    with pytest.raises(BakeoffError, match=r"FP32 reference \(fake-fp32.*cannot read this"):
        api.run(str(tmp_path / "w.toml"), api.RunOptions(quick=True, store=store_path))
    # The INT8 build sleeps 120 s: the run ended long before it would have.
    assert time.monotonic() - started < 60
    workers = [
        p
        for p in psutil.Process().children(recursive=True)
        if "bakeoff.inference.worker" in p.cmdline()
    ]
    assert workers == []
    (run_dir,) = (store_path.parent / "runs").iterdir()
    logs = {p.name for p in (run_dir / "logs").glob("*.log")}
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    if cores > 1:  # one core: the build waits for the reference, and never starts
        assert "build-fake-int8.log" in logs


def _built_beside(folder: Path, **options: Any) -> dict[str, Any]:
    return _two_batch_sizes(folder, '"fp32", "int8"', ", build_wall_s = { int8 = 1.0 }", **options)


def test_the_first_batch_sizes_workers_load_beside_the_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With two cores, a built variant's first measuring worker loads (and runs its
    quality pass) in a slot the builds leave free; the reference's own candidate
    gives the reference's outputs, so no separate reference process runs. The
    figures are the same kind as ever: the winners stand, the cold starts are
    marked as not loaded alone, and nothing loads early where cold starts must be
    measured alone."""
    from bakeoff import environment

    monkeypatch.setattr(environment, "physical_cores", lambda: 2)
    doc = _built_beside(tmp_path / "early")
    assert doc["variant_cache"]["loaded_beside_builds"] == ["fake-fp32-b1", "fake-int8-b1"]
    assert [v["winner"] for v in doc["verdicts"]] == ["fake-int8-b1", "fake-int8-b8"]
    by_id = {c["id"]: c for c in doc["candidates"]}
    for cid in ("fake-fp32-b1", "fake-int8-b1"):
        assert by_id[cid]["status"] == "ok"
        assert by_id[cid]["worker"]["loaded_alone"] is False
        assert by_id[cid]["worker"]["quality_batch_size"] == 8  # shared with batch 8
        assert by_id[cid]["cold_start_s"]["isolated"] is False
    assert by_id["fake-fp32-b1"]["quality"]["value"] == pytest.approx(1.0)
    (run_dir,) = (tmp_path / "early" / "runs").iterdir()
    assert not (run_dir / "logs" / "reference.log").exists()

    alone = _built_beside(tmp_path / "alone", worker_per_batch_size=True)
    assert alone["variant_cache"]["loaded_beside_builds"] == []
    (run_dir,) = (tmp_path / "alone" / "runs").iterdir()
    assert (run_dir / "logs" / "reference.log").exists()
    assert all(c["worker"]["loaded_alone"] is True for c in alone["candidates"])
