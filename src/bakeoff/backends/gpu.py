"""What the GPU runtimes share: finding a CUDA device without importing any framework,
the GPU model and driver for the fingerprint, and a PyTorch runner that synchronizes
the device before `run` returns and reads back the device memory peak.

Every check here is cheap (a file under /proc, or one `nvidia-smi` call, made once per
process: `probe`): `bakeoff env`, candidate enumeration and the advice run it in the main
process, where no framework may be imported.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.backends import Availability, BuildContext, Offer, Variant
from bakeoff.backends.common import package_availability

NVIDIA_PROC = Path("/proc/driver/nvidia/version")
# PyPI's Linux wheel of torch is the CUDA build; the +cpu one comes from PyTorch's CPU index.
TORCH_CUDA_INSTALL = "a CUDA build of PyTorch: pip install --force-reinstall torch==2.13.0"


def _query(query: str) -> list[list[str]]:
    """Rows of `nvidia-smi --query-...=... --format=csv`; raises when it cannot answer."""
    out = subprocess.run(
        ["nvidia-smi", query, "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout
    return [[p.strip() for p in line.split(",")] for line in out.strip().splitlines()]


def _nvidia_smi(query: str) -> list[list[str]] | None:
    """`_query`'s rows, or None when nvidia-smi cannot answer."""
    try:
        return _query(query)
    except (OSError, subprocess.SubprocessError):
        return None


@dataclass(frozen=True)
class GpuProbe:
    """What the one look for NVIDIA GPUs found: the fingerprint (`gpu_info`), the CUDA
    runtimes' availability (`no_cuda_reason`) and the advice all read it."""

    gpus: tuple[dict[str, Any], ...]  # name, driver, memory_mb, compute_capability
    source: str  # where they were read ("nvidia-smi"), or why none was found


@functools.cache
def probe() -> GpuProbe:
    """nvidia-smi where it is on PATH, else the kernel driver's file alone."""
    if shutil.which("nvidia-smi") is None:
        if not NVIDIA_PROC.exists():
            return GpuProbe((), f"{NVIDIA_PROC} is missing and nvidia-smi is not on PATH")
        # The kernel driver is loaded but the tool is missing: say what we can.
        try:
            first = NVIDIA_PROC.read_text().splitlines()[0].strip()
        except (OSError, IndexError):
            first = ""
        gpu = {"name": "NVIDIA GPU (nvidia-smi not on PATH)", "driver": first}
        return GpuProbe((gpu,), f"{NVIDIA_PROC} (no nvidia-smi)")
    try:
        rows = _query("--query-gpu=name,driver_version,memory.total,compute_cap")
    except (OSError, subprocess.SubprocessError) as exc:
        return GpuProbe((), f"nvidia-smi failed: {exc}")
    gpus = tuple(
        {
            "name": parts[0],
            "driver": parts[1],
            "memory_mb": int(parts[2]) if parts[2].isdigit() else parts[2],
            "compute_capability": parts[3] if len(parts) > 3 else None,
        }
        for parts in rows
        if len(parts) >= 3
    )
    return GpuProbe(gpus, "nvidia-smi" if gpus else "nvidia-smi lists no GPU")


def gpu_info() -> list[dict[str, Any]]:
    """One entry per NVIDIA GPU (name, driver, memory), or [] when there is none."""
    return [dict(g) for g in probe().gpus]


def no_cuda_reason() -> str | None:
    """None when an NVIDIA GPU with its driver is present, else why not."""
    found = probe()
    return None if found.gpus else f"no CUDA device: {found.source}"


def cuda_availability(
    dist: str, module: str, install: str, also: Callable[[], Availability] | None = None
) -> Availability:
    """Unavailable without a CUDA device (version still shown when installed). `also`
    checks a second requirement, only once the package and the device are there: the
    first one missing is what the user is told."""
    pkg = package_availability(dist, module, install)
    reason = no_cuda_reason()
    if reason is not None:
        return Availability(False, pkg.version, reason, f"needs an NVIDIA GPU; then {install}")
    if not pkg.available or also is None:
        return pkg
    other = also()
    return pkg if other.available else other


def torch_cuda_availability() -> Availability:
    a = cuda_availability("torch", "torch", TORCH_CUDA_INSTALL)
    if a.available and a.version and "+cpu" in a.version:
        return Availability(
            False, a.version, f"torch {a.version} is a CPU-only build", TORCH_CUDA_INSTALL
        )
    return a


def process_gpu_memory_mb() -> float | None:
    """Device memory this process holds now (nvidia-smi), for runtimes with no peak counter."""
    if shutil.which("nvidia-smi") is None:
        return None
    for row in _nvidia_smi("--query-compute-apps=pid,used_memory") or []:
        # A machine with no compute process answers with a one-field message line.
        if len(row) >= 2 and row[0] == str(os.getpid()) and row[1].isdigit():
            return float(row[1])
    return None


def torch_cuda_offers(runtime: str, precision: str, model_kind: str) -> list[Offer]:
    if model_kind not in ("torch", "hf"):
        return [Offer(Variant(runtime, precision), f"the model is {model_kind}, not PyTorch")]
    if precision == "fp32":
        return [Offer(Variant(runtime, "fp32"))]
    if precision in ("fp16", "bf16"):
        return [Offer(Variant(runtime, precision, "autocast"))]
    return [
        Offer(
            Variant(runtime, precision),
            f"no {precision} path for PyTorch on CUDA in this version; see onnxruntime-tensorrt "
            "and tensorrt",
        )
    ]


@dataclass(frozen=True)
class TorchOnCuda:
    """What a PyTorch-on-CUDA runtime module offers the registry (`availability`,
    `offers`, `build`), the same for eager and torch.compile but for the name; each
    module binds them at its top and writes its own `load`."""

    runtime: str

    def availability(self) -> Availability:
        return torch_cuda_availability()

    def offers(self, precision: str, model_kind: str) -> list[Offer]:
        return torch_cuda_offers(self.runtime, precision, model_kind)

    def build(self, variant: Variant, ctx: BuildContext) -> dict[str, Any]:
        return {}  # the model is rebuilt from its source inside the worker


def _with_device_memory(runner: Any) -> dict[str, Any]:
    return {**runner._settings, "device_memory_mb": process_gpu_memory_mb()}


def _replace_settings(runner: Any, value: dict[str, Any]) -> None:
    # The worker adds what it measured around the load (its imports' seconds).
    runner._settings = value


# `settings` of a runner whose runtime keeps no peak counter (its class binds this
# property and keeps what it was given in `_settings`): those, with the device memory
# the process holds when they are read (after the calls).
DEVICE_MEMORY_SETTINGS = property(_with_device_memory, _replace_settings)


class TorchCudaRunner:
    """A torch module on the GPU. `run` waits for the device (torch.cuda.synchronize), so
    the host clock around it measures the whole call; `settings` reads the memory peak."""

    def __init__(self, model: Any, device: Any, settings: dict[str, Any]) -> None:
        self.model, self.device, self._settings = model, device, settings

    @property
    def settings(self) -> dict[str, Any]:
        import torch

        peak = torch.cuda.max_memory_allocated(self.device)
        return {**self._settings, "device_memory_peak_mb": round(peak / 2**20, 1)}

    @settings.setter
    def settings(self, value: dict[str, Any]) -> None:
        # The worker adds what it measured around the load (its imports' seconds).
        self._settings = value

    def prepare(self, batch: dict[str, Any]) -> Any:
        import torch

        return tuple(torch.from_numpy(v).to(self.device) for v in batch.values())

    def run(self, prepared: Any) -> Any:
        import torch

        out = self.model(*prepared)
        torch.cuda.synchronize(self.device)
        return out

    def to_numpy(self, output: Any) -> Any:
        from bakeoff.models import first_output

        return first_output(output).detach().float().cpu().numpy()

    def named_outputs(self, output: Any) -> list[tuple[str, Any]]:
        from bakeoff.backends.torch_eager import torch_tensors

        return [(n, t.detach().float().cpu().numpy()) for n, t in torch_tensors(output)]


def torch_cuda_model(variant: Variant, ctx: Any) -> tuple[Any, Any, dict[str, Any]]:
    """The workload's torch model on cuda:0, in eval mode, with the device described."""
    import torch

    from bakeoff.backends.torch_eager import set_torch_threads
    from bakeoff.models import build_torch_model

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"torch {torch.__version__} sees no CUDA device (CUDA build: "
            f"{torch.version.cuda or 'no, CPU-only'}); install {TORCH_CUDA_INSTALL}"
        )
    settings = set_torch_threads(ctx.threads)
    device = torch.device("cuda", 0)
    model = build_torch_model(ctx.source).to(device).eval()
    props = torch.cuda.get_device_properties(device)
    settings.update(
        {
            "device": torch.cuda.get_device_name(device),
            "compute_capability": f"{props.major}.{props.minor}",
            "cuda_version": torch.version.cuda,
            "cudnn_version": torch.backends.cudnn.version(),
            "gpu": gpu_info(),
            "sync": "torch.cuda.synchronize after every call",
        }
    )
    torch.cuda.reset_peak_memory_stats(device)
    return model, device, settings


def with_cuda_autocast(model: Any, precision: str) -> Any:
    if precision not in ("fp16", "bf16"):
        return model
    import torch

    dtype = torch.float16 if precision == "fp16" else torch.bfloat16

    def call(*args: Any) -> Any:
        with torch.autocast("cuda", dtype=dtype):
            return model(*args)

    return call
