"""The GPU runtimes. Without a GPU (these machines) every one of them is `unavailable` with
the reason and the install hint, and `bakeoff env` says so; the `gpu`-marked tests run each
path on a tiny model where an NVIDIA GPU exists (make test-gpu) and are skipped elsewhere."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bakeoff import api
from bakeoff.backends.gpu import no_cuda_reason
from bakeoff.backends.openvino_gpu import no_gpu_reason
from bakeoff.candidates import enumerate_candidates

GPU_RUNTIMES = (
    "torch-cuda",
    "torch-compile-cuda",
    "onnxruntime-cuda",
    "onnxruntime-tensorrt",
    "tensorrt",
    "openvino-gpu",
    "jax-cuda",
)
NO_CUDA = no_cuda_reason()
needs_cuda = pytest.mark.skipif(NO_CUDA is not None, reason=str(NO_CUDA))


def test_nvidia_smi_answers_are_read_into_gpu_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a GPU machine's nvidia-smi prints, parsed here without one (the real tool's
    own output format: csv, no header, no units)."""
    import os

    from bakeoff.backends import gpu

    gpus = "--query-gpu=name,driver_version,memory.total,compute_cap"
    answers = {
        gpus: "NVIDIA H200, 570.86, 143771, 9.0\n",
        "--query-compute-apps=pid,used_memory": f"123, 50\n{os.getpid()}, 2048\n",
    }

    def fake_run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 0, stdout=answers[cmd[1]])

    monkeypatch.setattr(gpu.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(gpu.subprocess, "run", fake_run)
    gpu.probe.cache_clear()
    try:
        info = gpu.gpu_info()
        assert info == [
            {"name": "NVIDIA H200", "driver": "570.86", "memory_mb": 143771,
             "compute_capability": "9.0"}
        ]  # fmt: skip
        assert gpu.no_cuda_reason() is None
        assert gpu.process_gpu_memory_mb() == 2048.0
        answers["--query-compute-apps=pid,used_memory"] = "No running processes found\n"
        assert gpu.process_gpu_memory_mb() is None
    finally:
        gpu.probe.cache_clear()


@pytest.mark.skipif(NO_CUDA is None, reason="this machine has a CUDA device")
def test_every_gpu_runtime_is_unavailable_with_a_reason_here() -> None:
    for kind, runtimes in (("torch", GPU_RUNTIMES[:-1]), ("jax", ("jax-cuda",))):
        cands = enumerate_candidates(list(runtimes), ["fp32", "fp16"], [1], kind)
        assert {c.variant.runtime for c in cands} == set(runtimes)
        for c in cands:
            assert c.status == "unavailable", c.id
            assert "install:" in c.reason, c.reason
            if c.variant.runtime == "openvino-gpu":
                assert "render node" in c.reason
            else:
                assert c.reason.startswith("no CUDA device"), c.reason


def test_env_lists_every_runtime_without_importing_frameworks() -> None:
    # `bakeoff env --json` in a fresh process, which then reports what it imported.
    code = textwrap.dedent(
        """
        import contextlib, io, json, sys
        from typer.testing import CliRunner
        from bakeoff.cli import app

        result = CliRunner().invoke(app, ["env", "--json"])
        heavy = ("torch", "jax", "tensorflow", "keras", "onnxruntime", "openvino", "tvm")
        print(json.dumps({"exit": result.exit_code, "out": result.output,
                          "imported": [m for m in heavy if m in sys.modules]}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["exit"] == 0
    assert report["imported"] == []
    doc = json.loads(report["out"])
    rows = {r["runtime"]: r for r in doc["runtimes"]}
    for name in (*GPU_RUNTIMES, "jax", "tensorflow", "tvm"):
        assert name in rows, name
        row = rows[name]
        if not row["available"]:
            assert row["reason"] and row["install"], row
    if NO_CUDA is not None:
        assert doc["environment"]["gpu"] is None
        assert all(not rows[r]["available"] for r in GPU_RUNTIMES)
    packages = doc["environment"]["packages"]
    assert {"jax", "jaxlib", "keras", "apache-tvm", "ai-edge-litert"} <= set(packages)


def test_every_gpu_runner_takes_the_settings_the_worker_adds() -> None:
    """The worker adds its import seconds to a runner's settings after the load; a GPU
    runner reads its memory peak live through a property, which needs a setter too
    (the first run on a GPU machine found torch-cuda's missing)."""
    from bakeoff.backends import gpu, jax_cuda, onnxruntime_cuda, tensorrt_engine

    for runner in (
        gpu.TorchCudaRunner,
        onnxruntime_cuda.OrtGpuRunner,
        tensorrt_engine.TrtRunner,
        jax_cuda.JaxCudaRunner,
    ):
        settings = runner.__dict__.get("settings")
        assert isinstance(settings, property) and settings.fset is not None, runner.__name__


# ---------------------------------------------------------------- on a GPU only

TORCH_MODEL = textwrap.dedent(
    """
    import numpy as np
    import torch


    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
        )


    def inputs():
        return np.random.default_rng(0).standard_normal((96, 64)).astype(np.float32)
    """
)


def _torch_workload(tmp_path: Path, runtime: str, precisions: list[str]) -> Path:
    (tmp_path / "gpu_model.py").write_text(TORCH_MODEL)
    path = tmp_path / "workload.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            name = "tiny-gpu"
            [model]
            kind = "torch"
            factory = "gpu_model:build"
            [data]
            factory = "gpu_model:inputs"
            [quality]
            max_drop = 0.01
            [search]
            runtimes = ["torch", "{runtime}"]
            precisions = {json.dumps(precisions)}
            batch_sizes = [8]
            """
        )
    )
    return path


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(
    "runtime, memory_key",
    [
        ("torch-cuda", "device_memory_peak_mb"),
        ("torch-compile-cuda", "device_memory_peak_mb"),
        ("onnxruntime-cuda", "device_memory_mb"),
        ("onnxruntime-tensorrt", "device_memory_mb"),
        ("tensorrt", "device_memory_mb"),
    ],
)
def test_gpu_runtime_runs_a_tiny_model(
    tmp_path: Path, store_path: Path, runtime: str, memory_key: str
) -> None:
    wl = _torch_workload(tmp_path, runtime, ["fp32", "fp16"])
    doc = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=6)).document
    cands = {c["id"]: c for c in doc["candidates"]}
    c = cands[f"{runtime}-fp32-b8"]
    assert c["status"] == "ok", c["reason"]
    assert c["quality"]["drop"] < 1e-3
    assert c["settings"][memory_key] is not None
    assert doc["environment"]["gpu"], "the fingerprint names the GPU and its driver"
    fp16 = next(v for k, v in cands.items() if k.startswith(f"{runtime}-fp16"))
    assert fp16["status"] in ("ok", "rejected"), fp16["reason"]


@pytest.mark.gpu
@needs_cuda
def test_jax_cuda_runs_a_jax_function(tmp_path: Path, store_path: Path) -> None:
    from tiny_jax import jax_workload

    wl = jax_workload(tmp_path)
    wl.write_text(wl.read_text().replace("[search]", '[search]\nruntimes = ["jax", "jax-cuda"]'))
    doc = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=6)).document
    c = {c["id"]: c for c in doc["candidates"]}["jax-cuda-fp32-b8"]
    assert c["status"] == "ok", c["reason"]
    assert c["cold_start_s"]["compile"] > 0
    assert c["settings"]["jax_platforms"] == "cuda"
    assert c["settings"]["device_memory_peak_mb"] is not None


@pytest.mark.gpu
@pytest.mark.skipif(no_gpu_reason() is not None, reason=str(no_gpu_reason()))
def test_openvino_gpu_runs_a_tiny_model(tmp_path: Path, store_path: Path) -> None:
    wl = _torch_workload(tmp_path, "openvino-gpu", ["fp32"])
    doc = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=6)).document
    c = {c["id"]: c for c in doc["candidates"]}["openvino-gpu-fp32-b8"]
    assert c["status"] == "ok", c["reason"]
    assert c["settings"]["device"] == "GPU"
