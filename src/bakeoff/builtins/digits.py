"""builtin:digits — a small CNN trained on scikit-learn's digits on first use.

Training takes a few seconds and is cached (weights as safetensors, which
cannot run code when loaded). Quality is top-1 accuracy on a held-out split
the network never saw.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.paths import cache_dir
from bakeoff.workload import Workload, WorkloadSpec, workload_from_spec

SEED = 0
HELD_OUT = 0.3
EPOCHS = 30
WEIGHTS_NAME = "digits-cnn-v1.safetensors"


def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # N,1,8,8 in [0,1]
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target, test_size=HELD_OUT, random_state=SEED, stratify=digits.target
    )
    return x_train, x_test, y_train.astype(np.int64), y_test.astype(np.int64)


def _architecture() -> Any:
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def untrained() -> Any:
    """The digits CNN with fresh weights (the training recipe's model factory)."""
    return _architecture()


def train_and_validation() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x_train, y_train, x_val, y_val: the split the built-in model was trained on."""
    x_train, x_val, y_train, y_val = _split()
    return x_train, y_train, x_val, y_val


def weights_path() -> Path:
    return cache_dir() / WEIGHTS_NAME


def train_if_needed() -> Path:
    """Train once per cache; write atomically so concurrent runs never see half a file."""
    path = weights_path()
    if path.exists():
        return path
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(SEED)
    x_train, _, y_train, _ = _split()
    model = _architecture()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    xs, ys = torch.from_numpy(x_train), torch.from_numpy(y_train)
    generator = torch.Generator().manual_seed(SEED)
    # Gradients on whatever the process set before: a torch runtime loaded in this
    # process (bakeoff.backends.torch_eager) turns them off for the whole process.
    with torch.enable_grad():
        for _ in range(EPOCHS):
            order = torch.randperm(len(xs), generator=generator)
            for start in range(0, len(xs), 64):
                idx = order[start : start + 64]
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx])
                loss.backward()
                optimizer.step()
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    save_file(model.state_dict(), tmp)
    os.replace(tmp, path)
    return path


def build_model() -> Any:
    from safetensors.torch import load_file

    model = _architecture()
    model.load_state_dict(load_file(str(train_if_needed())))
    return model.eval()


def held_out() -> tuple[np.ndarray, np.ndarray]:
    _, x_test, _, y_test = _split()
    return x_test, y_test


def workload() -> Workload:
    train_if_needed()
    spec = WorkloadSpec.model_validate(
        {
            "name": "digits",
            "description": "small CNN on scikit-learn digits (8x8), top-1 accuracy on held-out",
            "model": {"kind": "torch", "factory": "bakeoff.builtins.digits:build_model"},
            "data": {"factory": "bakeoff.builtins.digits:held_out"},
            "quality": {"metric": "accuracy", "max_drop": 0.01},
        }
    )
    return workload_from_spec(spec, origin="builtin:digits", base_dir=None)
