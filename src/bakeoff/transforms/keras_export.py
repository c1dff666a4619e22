"""Keras 3 model -> shared weights file and ONNX, in a build process.

The ONNX export runs Keras' own exporter (``model.export(format="onnx")``) on
the PyTorch backend: that is the only Keras backend whose ONNX path needs no
extra package (TensorFlow's needs tf2onnx, JAX's jax2onnx, neither of which is
a bakeoff dependency). The result feeds ONNX Runtime and OpenVINO like a
torch export does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.source import ModelSource
from bakeoff.transforms import StepFailed, cached_step

ONNX_BACKEND = "torch"


def keras_weights(source: ModelSource, artifacts_dir: str, backend: str) -> str | None:
    """For a factory model, its weights saved once per run (None for a .keras file).

    Every backend and export then loads these same weights into the factory's
    model, so a factory that initialises randomly still gives one model.
    """
    if source.path is not None:
        return None

    def save(out: Path) -> dict[str, Any]:
        from bakeoff.keras_models import load_keras_model

        model = load_keras_model(source, backend)
        path = out / "model.weights.h5"
        model.save_weights(str(path))
        return {"path": str(path)}

    return str(cached_step(artifacts_dir, "keras-weights", save)["path"])


def load_for_build(
    source: ModelSource, artifacts_dir: str, backend: str, example: dict[str, np.ndarray]
) -> Any:
    """The model on `backend`, with the run's shared weights, called once on `example`."""
    from bakeoff.keras_models import ensure_built, load_keras_model

    weights = keras_weights(source, artifacts_dir, backend)
    model = load_keras_model(source, backend, weights)
    ensure_built(model, example)
    return model


def onnx_from_keras(
    source: ModelSource, artifacts_dir: str, example: dict[str, np.ndarray]
) -> dict[str, Any]:
    """The FP32 ONNX file of a Keras model: {"path", "exporter"}."""
    return cached_step(
        artifacts_dir, "onnx-fp32-keras", lambda out: _export(source, artifacts_dir, example, out)
    )


def _export(
    source: ModelSource, artifacts_dir: str, example: dict[str, np.ndarray], out: Path
) -> dict[str, Any]:
    import onnx

    model = load_for_build(source, artifacts_dir, ONNX_BACKEND, example)
    path = out / "model.onnx"
    try:
        model.export(str(path), format="onnx", verbose=False)
    except Exception as exc:  # the exporter raises whatever torch.onnx raises
        raise StepFailed(
            f"Keras ONNX export (model.export(format='onnx') on the {ONNX_BACKEND} backend) "
            f"failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        ) from exc
    _rename_inputs(path, list(example))
    onnx.checker.check_model(str(path))
    return {"path": str(path), "exporter": f"keras-{ONNX_BACKEND}"}


def _rename_inputs(path: Path, names: list[str]) -> None:
    """Give the graph inputs the data's names: Keras names them after its Input
    layers, and ONNX Runtime's static quantizer feeds calibration data by name."""
    import onnx

    model = onnx.load(str(path))
    graph = model.graph
    if len(graph.input) != len(names) or [i.name for i in graph.input] == names:
        return
    mapping = {inp.name: new for inp, new in zip(graph.input, names, strict=True)}
    for inp in graph.input:
        inp.name = mapping[inp.name]
    for node in graph.node:
        node.input[:] = [mapping.get(n, n) for n in node.input]
    onnx.save(model, str(path))
