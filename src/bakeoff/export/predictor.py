"""`load(DIR)`: an export folder read back as `predict(inputs)`.

The manifest's files are checked against their sha256, then only the runtime it
names is imported, and set up as the run measured it by the backend's own
functions (ONNX Runtime's session options, OpenVINO's CPU compile, LiteRT's
interpreter) and fed by the backend's own runner. Nothing heavy is imported at
the top of this module: each loader imports its runtime when it is called.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import Layout
from bakeoff.export.manifest import FORMAT, MANIFEST, check_files, read_manifest

__all__ = ["FORMAT", "MANIFEST", "Predictor", "load", "load_checked", "manifest_layout"]

Run = Callable[[dict[str, np.ndarray]], np.ndarray]


class Predictor:
    """`predict(inputs)`: a dict of numpy arrays by input name -> the first output, float32."""

    def __init__(self, manifest: dict[str, Any], run: Run) -> None:
        self.manifest = manifest
        self.input_names = [i["name"] for i in manifest["inputs"]]
        self._run = run

    def __call__(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        missing = [n for n in self.input_names if n not in inputs]
        if missing:
            raise ValueError(f"missing input(s) {', '.join(missing)}; expects {self.input_names}")
        # np.asarray, not np.ascontiguousarray: that makes a 0-d input 1-d.
        ordered = {n: np.asarray(inputs[n], order="C") for n in self.input_names}
        return np.asarray(self._run(ordered), dtype=np.float32)


def load(path: str | Path, threads: int | None = None) -> Predictor:
    """Load an export folder: check its files, import only its runtime, return `predict`.
    `threads` overrides the measured thread count (a server sharing the cores out
    between several instances); by default the run's own is used."""
    folder = Path(path)
    manifest = read_manifest(folder)
    check_files(folder, manifest)
    return load_checked(folder, manifest, threads)


def load_checked(folder: Path, manifest: dict[str, Any], threads: int | None = None) -> Predictor:
    """`load` of a folder whose manifest (`read_manifest`) and files (`check_files`)
    were checked already: a server checks them before it listens, loads after."""
    runtime = manifest["runtime"]
    loaders = {
        "onnxruntime": _load_onnxruntime,
        "openvino": _load_openvino,
        "torch": _load_torch,
        "torch-compile": _load_torch,
        "litert": _load_litert,
    }
    if threads is not None:
        manifest = {**manifest, "load": _with_threads(runtime, manifest["load"], threads)}
    return Predictor(manifest, loaders[runtime](folder, manifest))


def _with_threads(runtime: str, load_config: dict[str, Any], threads: int) -> dict[str, Any]:
    key = {
        "onnxruntime": "intra_op_num_threads",
        "openvino": "INFERENCE_NUM_THREADS",
        "litert": "num_threads",
    }.get(runtime, "threads")
    config = {**load_config, key: threads}
    if runtime == "openvino":
        config["NUM_STREAMS"] = 1  # one stream per instance: its threads are the instance's
    return config


def manifest_layout(manifest: dict[str, Any]) -> Layout:
    """Where each input's batch is, as the manifest lists it (an older manifest,
    without batch_axis, had every input batched on axis 0)."""
    inputs = manifest["inputs"]
    return Layout(
        {i["name"]: int(i["batch_axis"]) for i in inputs if i.get("batch_axis") not in (0, None)},
        tuple(i["name"] for i in inputs if "batch_axis" in i and i["batch_axis"] is None),
    )


def _load_onnxruntime(folder: Path, manifest: dict[str, Any]) -> Run:
    from bakeoff.backends import onnxruntime as backend

    cfg = manifest["load"]
    spinning = cfg.get("allow_spinning")  # "default": ONNX Runtime's own
    options = backend.session_options(
        int(cfg["intra_op_num_threads"]),
        inter_op_threads=int(cfg["inter_op_num_threads"]),
        graph_optimization_level=cfg["graph_optimization_level"],
        allow_spinning=spinning if isinstance(spinning, bool) else None,
        log_severity_level=None,  # a deployment sees ONNX Runtime's warnings
    )
    session = backend.make_session(str(folder / manifest["file"]), options)
    runner = backend.OrtRunner(session, {})

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        return runner.to_numpy(runner.run(runner.prepare(inputs)))

    return run


def _load_openvino(folder: Path, manifest: dict[str, Any]) -> Run:
    from bakeoff.backends import openvino as backend

    # the measured config: INFERENCE_PRECISION_HINT (f32 unless the variant hints
    # f16/bf16), threads, streams and performance hint, as OpenVINO applied them
    compiled = backend.compile_cpu(str(folder / manifest["file"]), dict(manifest["load"]))
    runner = backend.OpenVinoRunner(compiled, {})

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        return runner.to_numpy(runner.run(runner.prepare(inputs)))

    return run


def _load_torch(folder: Path, manifest: dict[str, Any]) -> Run:
    # Not torch_eager.set_torch_threads: that also turns gradients off for the whole
    # process, which a deployment's own code would not expect of a load.
    import torch

    cfg = manifest["load"]
    torch.set_num_threads(int(cfg["threads"]))
    path = folder / manifest["file"]
    module: Any = (
        torch.jit.load(str(path))  # TorchScript, as a Triton model repository holds it
        if path.suffix == ".pt"
        else torch.export.load(str(path)).module()
    )
    if cfg.get("compile"):
        c = cfg["compile"]
        module = torch.compile(module, backend=c["backend"], mode=c["mode"], dynamic=c["dynamic"])

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            out = module(*(torch.from_numpy(v) for v in inputs.values()))
        while isinstance(out, (tuple, list)):
            out = out[0]
        if isinstance(out, dict):
            out = next(iter(out.values()))
        return np.asarray(out.detach().float().numpy())

    return run


def _load_litert(folder: Path, manifest: dict[str, Any]) -> Run:
    from bakeoff.backends import litert as backend

    interpreter = backend.make_interpreter(
        str(folder / manifest["file"]), int(manifest["load"]["num_threads"])
    )
    layout = manifest_layout(manifest)
    # the batch size the interpreter's tensors are allocated for, and a runner of them
    state: dict[str, Any] = {"batch": 0, "runner": None}

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        n = layout.count(inputs)
        if n != state["batch"]:  # converted with a dynamic batch axis: resize, allocate
            backend.allocate(interpreter, layout, list(inputs), n)
            state["batch"], state["runner"] = n, backend.LiteRtRunner(interpreter, {})
        runner = state["runner"]
        return runner.to_numpy(runner.run(runner.prepare(inputs)))  # get_tensor copies

    return run
