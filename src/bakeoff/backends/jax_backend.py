"""JAX on the CPU: a workload's pure function `fn(params, *inputs)` under `jax.jit`, FP32 and
BF16 (parameters and floating inputs cast to bfloat16).

The function is compiled for the exact batch shape in `load` (`jit(...).lower(...).compile()`),
so compile time is recorded apart (settings["compile_s"]) and never lands in steady-state
latency; `run` blocks until the result is computed (`block_until_ready`), since JAX dispatches
asynchronously and would otherwise return before the work is done.

Calling convention (kind = "jax"): `fn(params, *inputs)`, the inputs positional, in the order of
the workload's data arrays; `params` is the pytree read from the params file: a .npz whose keys
nest on "/" ("dense1/kernel" -> params["dense1"]["kernel"]), or a Flax msgpack file
(`flax.serialization.to_bytes` / `msgpack_serialize`). Nothing is ever unpickled.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends.common import check_options, package_availability
from bakeoff.batching import read_split
from bakeoff.hardware import emulation_note
from bakeoff.jax_platform import set_platform

RUNTIME = "jax"
# jax.jit compiles for the batch shape in `load`.
COMPILES_WHEN_LOADED = True
INSTALL = "pip install jax==0.10.2 jaxlib==0.10.2 (or: make frameworks)"
OPTIONS = {"threads"}


def availability() -> Availability:
    return package_availability("jaxlib", "jax", INSTALL)


def jax_offers(runtime: str, precision: str, model_kind: str, bf16_note: str | None) -> list[Offer]:
    if model_kind != "jax":
        return [
            Offer(
                Variant(runtime, precision),
                f'the model is {model_kind}; {runtime} runs kind = "jax" functions',
            )
        ]
    if precision == "fp32":
        return [Offer(Variant(runtime, "fp32"))]
    if precision == "bf16":
        return [Offer(Variant(runtime, "bf16"), note=bf16_note)]
    if precision == "fp16":
        return [
            Offer(
                Variant(runtime, "fp16"),
                "not offered for a JAX function: XLA computes float16 on the CPU by upcasting to "
                "float32; see bf16",
            )
        ]
    return [
        Offer(
            Variant(runtime, precision),
            f"no {precision} path for JAX functions: XLA has no post-training quantizer for "
            "a plain function and its params",
        )
    ]


def offers(precision: str, model_kind: str) -> list[Offer]:
    # XLA's CPU backend computes bf16 on any CPU; without native bf16 it emulates it.
    return jax_offers(RUNTIME, precision, model_kind, emulation_note("bf16"))


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    return {}  # nothing to convert: the worker jits the user's function


def read_params(path: str) -> Any:
    """The params pytree from a .npz ("/" in keys nests) or a Flax msgpack file."""
    if path.endswith(".msgpack"):
        from flax import serialization

        with open(path, "rb") as f:
            return serialization.msgpack_restore(f.read())
    tree: dict[str, Any] = {}
    with np.load(path, allow_pickle=False) as z:
        for key in z.files:
            *parents, leaf = key.split("/")
            node = tree
            for part in parents:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise ValueError(f"params {path}: key {key!r} nests under an array")
            node[leaf] = z[key]
    return tree


def sample_specs(ctx: LoadContext) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Per-input (shape, dtype) of one batch, read from the run's data file."""
    if not ctx.data_path:
        raise RuntimeError("the worker gave no data file: cannot compile for the batch shape")
    arrays, layout = read_split(ctx.data_path, "pool", ctx.input_names)
    return [(layout.batch_shape(n, a.shape, ctx.batch_size), a.dtype) for n, a in arrays.items()]


class JaxRunner:
    def __init__(
        self,
        compiled: Any,
        jitted: Any,
        params: Any,
        device: Any,
        cast: Any,
        settings: dict[str, Any],
    ) -> None:
        self.compiled, self.jitted, self.params = compiled, jitted, params
        self.device, self.cast, self.settings = device, cast, settings
        import jax

        # What the variant ships: its params at the precision it runs (bf16 halves them).
        self.model_bytes = sum(int(x.nbytes) for x in jax.tree_util.tree_leaves(params))

    def prepare(self, batch: dict[str, np.ndarray]) -> tuple[Any, ...]:
        import jax

        return tuple(jax.device_put(self.cast(v), self.device) for v in batch.values())

    def run(self, prepared: tuple[Any, ...]) -> Any:
        import jax

        try:
            out = self.compiled(self.params, *prepared)
        except TypeError:
            # Another shape than the one compiled (the quality check at a second
            # shape): jit compiles it on this call.
            out = self.jitted(self.params, *prepared)
        return jax.block_until_ready(out)

    def to_numpy(self, output: Any) -> np.ndarray:
        import jax

        leaves = jax.tree_util.tree_leaves(output)
        if not leaves:
            raise ValueError("the JAX function returned no array")
        return np.asarray(leaves[0], dtype=np.float32)

    def named_outputs(self, output: Any) -> list[tuple[str, Any]]:
        from bakeoff.tensors import named_outputs

        return [(n, np.asarray(a)) for n, a in named_outputs(output)]


def load_jax(variant: Variant, ctx: LoadContext, platform: str) -> JaxRunner:
    from bakeoff.source import import_factory

    check_options(ctx.options, OPTIONS, variant.runtime)
    settings = set_platform(platform, ctx.threads)
    import jax
    import jax.numpy as jnp

    source = ctx.source
    if not source.function or not source.weights:
        raise ValueError('the jax runtime needs model kind = "jax" with function and params')
    fn = import_factory(source.function, source.base_dir, source.function, "model.function")
    device = jax.devices(platform)[0]
    low = jnp.bfloat16 if variant.precision == "bf16" else None

    def cast(x: Any) -> Any:
        x = np.asarray(x)
        return x.astype(low) if low is not None and x.dtype.kind == "f" else x

    params = jax.device_put(jax.tree_util.tree_map(cast, read_params(source.weights)), device)
    jitted = jax.jit(fn)
    specs = [
        jax.ShapeDtypeStruct(shape, low if low is not None and dtype.kind == "f" else dtype)
        for shape, dtype in sample_specs(ctx)
    ]
    t0 = time.perf_counter()
    try:
        lowered = jitted.lower(params, *specs)
    except Exception as exc:
        raise RuntimeError(
            f"model.function {source.function!r} could not be traced as fn(params, *inputs) "
            f"with inputs {[tuple(s.shape) for s in specs]}: {type(exc).__name__}: {exc}"
        ) from exc
    compiled = lowered.compile()
    settings.update(
        {
            "jax_version": jax.__version__,
            "device": str(device),
            "device_kind": device.device_kind,
            "compile_s": round(time.perf_counter() - t0, 6),
            "compiled_for": [list(s.shape) for s in specs],
            "dtype": "bfloat16 (params and float inputs)" if low is not None else "float32",
        }
    )
    return JaxRunner(compiled, jitted, params, device, cast, settings)


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> JaxRunner:
    return load_jax(variant, ctx, "cpu")
