"""builtin:digits-keras — the digits classifier defined once in Keras 3, trained on
first use, then measured on every Keras backend and the exported runtimes.

Training runs in a child process with KERAS_BACKEND set (the orchestrator never
imports keras) and is cached as a .keras file, which bakeoff loads with
safe_mode=True. The data and the held-out split are builtin:digits' own,
channels-last (N, 8, 8, 1) as Keras' Conv2D expects. Quality is top-1
accuracy on the held-out split the network never saw.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bakeoff.errors import BakeoffError
from bakeoff.paths import cache_dir
from bakeoff.workload import KERAS_DEFAULT_RUNTIMES, Workload, WorkloadSpec, workload_from_spec

SEED = 0
EPOCHS = 30
MODEL_NAME = "digits-keras-v1.keras"
TRAIN_BACKEND = "tensorflow"
TRAIN_TIMEOUT_S = 600


def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from bakeoff.builtins.digits import _split as torch_split

    x_train, x_test, y_train, y_test = torch_split()
    # N,1,8,8 -> N,8,8,1: Keras convolutions are channels-last by default.
    return x_train.transpose(0, 2, 3, 1), x_test.transpose(0, 2, 3, 1), y_train, y_test


def model_path() -> Path:
    return cache_dir() / MODEL_NAME


def _train(out: str) -> None:
    """In the child process: build, train and save the model (keras imported here only)."""
    from bakeoff.keras_models import set_keras_backend

    keras = set_keras_backend(TRAIN_BACKEND)
    keras.utils.set_random_seed(SEED)
    x_train, _, y_train, _ = _split()
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1), name="image"),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),  # logits
        ],
        name="digits_cnn",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(2e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(x_train, y_train, batch_size=64, epochs=EPOCHS, shuffle=True, verbose=0)
    model.save(out)


def train_if_needed() -> Path:
    """Train once per cache, in a child process; written atomically (rename)."""
    path = model_path()
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".keras")
    os.close(fd)
    env = {**os.environ, "KERAS_BACKEND": TRAIN_BACKEND, "TF_CPP_MIN_LOG_LEVEL": "2"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bakeoff.builtins.digits_keras", tmp],
            env=env,
            capture_output=True,
            text=True,
            timeout=TRAIN_TIMEOUT_S,
        )
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise BakeoffError(
                f"builtin:digits-keras: training the Keras model failed "
                f"(exit {done.returncode}):\n{tail}"
            )
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def held_out() -> tuple[np.ndarray, np.ndarray]:
    _, x_test, _, y_test = _split()
    return x_test, y_test


def workload() -> Workload:
    path = train_if_needed()
    spec = WorkloadSpec.model_validate(
        {
            "name": "digits-keras",
            "description": "small Keras 3 CNN on scikit-learn digits (8x8), top-1 accuracy "
            "on held-out, on each Keras backend and exported",
            "model": {"kind": "keras", "path": str(path)},
            "data": {"factory": "bakeoff.builtins.digits_keras:held_out"},
            "quality": {"metric": "accuracy", "max_drop": 0.01},
            # Named, not left to the advice: this workload exists to compare every
            # framework and export on one model (LiteRT included, whatever the target).
            "search": {"runtimes": KERAS_DEFAULT_RUNTIMES},
        }
    )
    return workload_from_spec(spec, origin="builtin:digits-keras", base_dir=None)


if __name__ == "__main__":
    _train(sys.argv[1])
