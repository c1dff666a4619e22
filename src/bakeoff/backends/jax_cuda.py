"""JAX on an NVIDIA GPU: the workload's function under `jax.jit` on the CUDA device, FP32 and
BF16, compiled for the batch shape in `load` (compile time apart), with `block_until_ready`
before `run` returns and the device's memory peak (memory_stats) in the settings."""

from __future__ import annotations

from typing import Any

from bakeoff.backends import (
    Availability,
    BuildContext,
    LoadContext,
    Offer,
    Variant,
    gpu,
    jax_backend,
)

RUNTIME = "jax-cuda"
INSTALL = 'pip install "jax[cuda13]==0.10.2"'


def availability() -> Availability:
    a = gpu.cuda_availability("jax-cuda13-plugin", "jax_plugins", INSTALL)
    if a.available or a.reason.startswith("no CUDA"):
        return a
    # The CUDA 12 plugin works as well.
    b = gpu.cuda_availability("jax-cuda12-plugin", "jax_plugins", INSTALL)
    return b if b.available else a


def offers(precision: str, model_kind: str) -> list[Offer]:
    return jax_backend.jax_offers(RUNTIME, precision, model_kind, None)


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    return {}


class JaxCudaRunner(jax_backend.JaxRunner):
    @property
    def settings(self) -> dict[str, Any]:
        stats = self.device.memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return {
            **self._settings,
            "device_memory_peak_mb": None if peak is None else round(peak / 2**20, 1),
        }

    @settings.setter
    def settings(self, value: dict[str, Any]) -> None:
        self._settings = value


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> JaxCudaRunner:
    r = jax_backend.load_jax(variant, ctx, "cuda")
    runner = JaxCudaRunner(r.compiled, r.jitted, r.params, r.device, r.cast, r.settings)
    runner.settings = {**r.settings, "gpu": gpu.gpu_info()}
    return runner
