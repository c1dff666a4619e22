"""A tiny JAX function with its parameters and data, written next to a workload TOML
that runs it (`jax_workload`): for the JAX backend's tests and the GPU runtimes'."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

JAX_FUNCTION = textwrap.dedent(
    """
    import jax.numpy as jnp


    def apply(params, x):
        h = jnp.maximum(x @ params["dense1"]["kernel"] + params["dense1"]["bias"], 0.0)
        return h @ params["dense2"]["kernel"] + params["dense2"]["bias"]
    """
)

DATA = textwrap.dedent(
    """
    import numpy as np


    def inputs():
        return {"x": np.random.default_rng(0).standard_normal((96, 64)).astype(np.float32)}
    """
)


def write_params(path: Path) -> None:
    r = np.random.default_rng(1)
    np.savez(
        path,
        **{
            "dense1/kernel": (r.standard_normal((64, 32)) * 0.1).astype(np.float32),
            "dense1/bias": np.zeros(32, np.float32),
            "dense2/kernel": (r.standard_normal((32, 10)) * 0.1).astype(np.float32),
            "dense2/bias": np.zeros(10, np.float32),
        },
    )


def jax_workload(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "tiny_fn.py").write_text(JAX_FUNCTION)
    (tmp_path / "tiny_data.py").write_text(DATA)
    write_params(tmp_path / "params.npz")
    path = tmp_path / "jax.toml"
    path.write_text(
        textwrap.dedent(
            """
            name = "tiny-jax"
            [model]
            kind = "jax"
            function = "tiny_fn:apply"
            params = "params.npz"
            [data]
            factory = "tiny_data:inputs"
            [search]
            precisions = ["fp32", "bf16", "int8"]
            batch_sizes = [8]
            """
        )
        + extra
    )
    return path
