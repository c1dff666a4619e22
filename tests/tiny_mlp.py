"""The tiny MLP on scikit-learn's digits that runtime tests write next to a workload.

Test files extend `TINY_MLP` with models of their own (a custom operator, say).
"""

from __future__ import annotations

import textwrap

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
