"""The tiny MLP on scikit-learn's digits that runtime tests write next to a workload.

Test files extend `TINY_MLP` with models of their own (a custom operator, say).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

TINY_MLP = textwrap.dedent(
    """
    import numpy as np
    import torch
    from sklearn.datasets import load_digits


    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
            )

        def forward(self, x):
            return self.net(x)


    def build():
        torch.manual_seed(0)
        return Mlp()


    def inputs():
        return (load_digits().data / 16.0).astype(np.float32)
    """
)

# Its workload: the model and its data from the module above, a cosine gate.
TINY_WORKLOAD = textwrap.dedent(
    """
    name = "tiny"
    [model]
    kind = "torch"
    factory = "tiny_model:build"
    [data]
    factory = "tiny_model:inputs"
    [quality]
    metric = "cosine"
    max_drop = 0.01
    """
)


def write_tiny_workload(folder: Path, module_text: str = TINY_MLP, extra: str = "") -> Path:
    """`folder`/tiny_model.py and `folder`/workload.toml (plus `extra` TOML); the latter's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny_model.py").write_text(module_text)
    path = folder / "workload.toml"
    path.write_text(TINY_WORKLOAD + textwrap.dedent(extra))
    return path


def mlp_onnx(path: Path, sizes: tuple[int, int, int], input_name: str = "x") -> Path:
    """A two-layer MLP (Linear, ReLU, Linear of `sizes`) as an ONNX file at `path`, its
    batch axis dynamic; the TorchScript exporter writes each Linear as Gemm."""
    import torch

    torch.manual_seed(0)
    features, hidden, out = sizes
    net = torch.nn.Sequential(
        torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, out)
    )
    torch.onnx.export(
        net,
        (torch.zeros(2, features),),
        str(path),
        input_names=[input_name],
        output_names=["output"],
        dynamic_axes={input_name: {0: "batch"}, "output": {0: "batch"}},
        dynamo=False,
    )
    return path
