"""Model size on disk per variant: what a deployment has to ship."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any


def artifact_files(path: str | Path) -> list[Path]:
    """The model file and the files it needs beside it.

    OpenVINO keeps weights in a .bin next to the .xml; ONNX may keep them as
    external data (model.onnx.data, or any file next to it that the graph names).
    """
    main = Path(path)
    if not main.is_file():
        return []
    files = [main]
    if main.suffix == ".xml":
        files.append(main.with_suffix(".bin"))
    elif main.suffix == ".onnx":
        files += sorted(main.parent.glob(main.name + ".data")) + _onnx_external(main)
    return [f for f in dict.fromkeys(files) if f.is_file()]


def _onnx_external(path: Path) -> list[Path]:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # unreadable here; the runtime will report it when it loads
        return []
    names = {
        entry.value
        for tensor in model.graph.initializer
        for entry in tensor.external_data
        if entry.key == "location"
    }
    return [path.parent / n for n in sorted(names)]


def artifact_bytes(artifact: dict[str, Any]) -> int | None:
    path = artifact.get("path")
    files = artifact_files(path) if path else []
    return sum(f.stat().st_size for f in files) if files else None


def torch_module_bytes(module: Any) -> int:
    """Bytes of the module's state_dict as torch.save writes it (packed INT8 included)."""
    import torch

    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    return buffer.getbuffer().nbytes


def model_bytes(runner: Any, artifact: dict[str, Any]) -> int | None:
    """What the runner itself reports (`model_bytes`: JAX params, a Keras model
    quantized at load), which knows the weights as they run; else on disk for file
    artifacts; for a torch module built in the worker, its weights."""
    if isinstance(getattr(runner, "model_bytes", None), int):
        return int(runner.model_bytes)
    size = artifact_bytes(artifact)
    if size is None:
        module = getattr(runner, "model", None)
        module = getattr(module, "__wrapped__", module)  # the BF16/FP16 autocast call
        original = getattr(module, "_orig_mod", module)  # torch.compile wraps the module
        if original is not None and hasattr(original, "state_dict"):
            size = torch_module_bytes(original)
    return size
