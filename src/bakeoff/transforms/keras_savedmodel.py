"""A Keras model as a TensorFlow SavedModel, for OpenVINO to convert, where Keras' ONNX
export fails (both of torch's ONNX exporters refuse some real legacy models: fer
25.10.3's emotion CNN stops at a Cast the TorchScript exporter cannot write).

Keras picks its backend once per process and the ONNX export ran on torch, so the
SavedModel is written by a child process on the TensorFlow backend, from the same
file or the same shared weights (transforms/keras_export.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.source import ModelSource
from bakeoff.transforms import StepFailed, cached_step

STEP = "Keras SavedModel export (model.export(format='tf_saved_model') on the tensorflow backend)"


def savedmodel_from_keras(
    source: ModelSource, artifacts_dir: str, example: dict[str, np.ndarray]
) -> dict[str, Any]:
    """The model's SavedModel folder: {"path"}."""
    return cached_step(
        artifacts_dir,
        "savedmodel-keras",
        lambda out: _in_child(source, artifacts_dir, example, out),
    )


def _in_child(
    source: ModelSource, artifacts_dir: str, example: dict[str, np.ndarray], out: Path
) -> dict[str, Any]:
    arrays: dict[str, Any] = dict(example)
    np.savez(out / "example.npz", **arrays)
    spec = json.dumps(dataclasses.asdict(source))
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-m", __name__, spec, artifacts_dir, str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    print(done.stderr[-4000:], file=sys.stderr)  # the whole of it is in the build log
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise StepFailed(f"{STEP} failed: {lines[-1][:300] if lines else done.returncode}")
    (out / "example.npz").unlink()
    return {"path": str(out / "saved_model")}


def main(argv: list[str]) -> None:
    from bakeoff.transforms.keras_export import load_for_build

    source = ModelSource(**json.loads(argv[0]))
    artifacts_dir, out = argv[1], Path(argv[2])
    with np.load(out / "example.npz", allow_pickle=False) as saved:
        example = {name: saved[name] for name in saved.files}
    model = load_for_build(source, artifacts_dir, "tensorflow", example)
    model.export(str(out / "saved_model"), format="tf_saved_model", verbose=False)


if __name__ == "__main__":
    main(sys.argv[1:])
