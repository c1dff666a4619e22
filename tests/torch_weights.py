"""A tiny torch architecture that tests write next to a workload, with its weights
given by a file (`weights`), and pickles that a weights-only loader must refuse.

tests/test_source.py and tests/test_models.py share it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

ARCH_MODULE = textwrap.dedent(
    """
    import numpy as np
    import torch


    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
            )

        def forward(self, x):
            return self.net(x)


    def build():
        return Mlp()  # not seeded: only the weights file makes two builds agree


    def inputs():
        return np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    """
)


def torch_workload(
    tmp_path: Path, weights: str | None, tail: str = "", model_extra: str = ""
) -> Path:
    """workload.toml in `tmp_path`: the tiny architecture, `weights` if given, then
    `model_extra` lines of [model] and `tail` after [data]."""
    (tmp_path / "tiny_arch.py").write_text(ARCH_MODULE)
    line = f'weights = "{weights}"\n' if weights else ""
    path = tmp_path / "workload.toml"
    path.write_text(
        'name = "tiny"\n[model]\nkind = "torch"\nfactory = "tiny_arch:build"\n'
        f'{line}{model_extra}[data]\nfactory = "tiny_arch:inputs"\n{tail}'
    )
    return path


def reference_model(tmp_path: Path, seed: int = 1234) -> Any:
    """The factory's architecture with seeded weights: what the files hold."""
    import torch

    (tmp_path / "tiny_arch.py").write_text(ARCH_MODULE)
    ns: dict = {}
    exec(compile(ARCH_MODULE, "tiny_arch", "exec"), ns)
    torch.manual_seed(seed)
    return ns["build"]().eval()


class RunsCode:
    """Unpickling this calls exec(): it writes a marker file. torch.save pickles it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


class NotATensor:
    """A class of the user's own in a checkpoint: unpickling it would import and call it."""

    def __init__(self) -> None:
        self.value = 3
