"""`bakeoff export`: a measured candidate's artifact, ready to deploy, and `load` to run it.

An export folder holds the model file(s) exactly as measured and
``manifest.json``: what the candidate is (runtime, version, precision,
method), how it was run (the runtime settings it was measured with, threads),
its inputs, its measured quality and speed, the sha256 of every file, and
the run it came from. What is written per runtime:

- ``onnxruntime``: ``model.onnx`` (with its external-data files, if any).
- ``openvino``: ``model.xml`` + ``model.bin`` (the IR; FP16/BF16 variants are
  the FP32 IR run with an inference precision hint, which the manifest keeps).
- ``torch`` / ``torch-compile``: ``model.pt2``, a `torch.export` program of
  the model as it was measured (BF16/FP16 autocast and INT4 weight-only layers
  included), with a dynamic batch axis, saved with `torch.export.save`; it
  loads with `torch.export.load` and needs neither bakeoff nor the model's
  code. torch-compile is compiled again on load with the measured mode.
  PyTorch dynamic INT8 cannot be saved this way (its packed Linear weights are
  not exportable) and is refused with that reason.
- ``litert``: ``model.tflite``, the converted flatbuffer as measured (INT8
  included), with a dynamic batch axis; `load` runs it on LiteRT's interpreter
  with the measured thread count.

`load(DIR)` reads the manifest, checks every file's sha256, imports only the
runtime the manifest names, and returns a callable ``predict(inputs)``. This
module imports nothing heavy at the top, so a deployment needs bakeoff's
numpy dependency and the one runtime, nothing else.
"""

from __future__ import annotations

import datetime
import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import Layout, read_split, split_names
from bakeoff.cache import sha256_file
from bakeoff.errors import UserError
from bakeoff.paths import RunFolder
from bakeoff.tensors import map_inputs

MANIFEST = "manifest.json"
FORMAT = 1
EXPORTABLE = ("onnxruntime", "openvino", "torch", "torch-compile", "litert")
# The package whose version the run recorded, per runtime.
_PACKAGE = {
    "onnxruntime": "onnxruntime",
    "openvino": "openvino",
    "torch": "torch",
    "torch-compile": "torch",
    "litert": "ai-edge-litert",
}
# The exported name of a runtime's model file (its side files keep theirs).
_MAIN_FILE = {"onnxruntime": "model.onnx", "openvino": "model.xml", "litert": "model.tflite"}


# ---------------------------------------------------------------- export


def export(
    run_id: str,
    out: str | Path,
    candidate_id: str | None = None,
    store: str | Path | None = None,
) -> dict[str, Any]:
    """Write candidate `candidate_id` of run `run_id` (default: the winner of the run's
    first verdict) to the folder `out`; return its manifest."""
    from bakeoff import api
    from bakeoff.paths import DEFAULT_STORE

    store_path = Path(store if store is not None else DEFAULT_STORE)
    record = api.show_run(run_id, store_path)
    run_id = record["run_id"]
    cand = _choose(record, candidate_id)
    out_dir = Path(out)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UserError(f"--out {out_dir}: exists and is not an empty folder")
    runtime = cand["runtime"]
    if runtime not in EXPORTABLE:
        raise UserError(
            f"candidate {cand['id']}: bakeoff export writes {', '.join(EXPORTABLE)} "
            f"candidates, not {runtime}"
        )
    run = RunFolder.of(store_path, run_id)
    data_path = run.data
    if not data_path.exists():
        raise UserError(f"run {run_id}: its folder {run.path} is gone (data.npz is missing)")
    with np.load(data_path, allow_pickle=False) as z:
        names = split_names(z.files, "quality")
    examples, layout = read_split(data_path, "quality", names)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.export-{secrets.token_hex(3)}"
    tmp.mkdir()
    try:
        if runtime in ("torch", "torch-compile"):
            artifact = _torch_program(record, cand, run, examples, layout, tmp)
        else:
            artifact = _copy_artifact(cand, run, tmp)
        files = {
            p.relative_to(tmp).as_posix(): {"sha256": sha256_file(p), "bytes": p.stat().st_size}
            for p in sorted(tmp.rglob("*"))
            if p.is_file()
        }
        manifest = _manifest(record, cand, artifact, examples, layout, files)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        os.rename(tmp, out_dir)  # whole or absent: never half an export under `out`
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _choose(record: dict[str, Any], candidate_id: str | None) -> dict[str, Any]:
    run_id, doc = record["run_id"], record["document"]
    candidates = doc["candidates"] if doc else record["candidates"]
    by_id = {c["id"]: c for c in candidates}
    if candidate_id is None:
        if not doc or not doc.get("verdicts"):
            raise UserError(
                f"run {run_id} is {record['status']} and has no verdict to take a winner "
                "from; name one with --candidate ID"
            )
        verdict = doc["verdicts"][0]
        if not verdict.get("winner"):
            raise UserError(
                f"run {run_id}: the batch-{verdict['batch_size']} verdict has no winner "
                f"({verdict.get('reason')}); name a candidate with --candidate ID"
            )
        candidate_id = str(verdict["winner"])
    cand = by_id.get(candidate_id)
    if cand is None:
        ok = ", ".join(c["id"] for c in candidates if c["status"] == "ok") or "none"
        raise UserError(f"run {run_id} has no candidate {candidate_id!r}; its ok candidates: {ok}")
    if cand["status"] != "ok":
        raise UserError(
            f"candidate {candidate_id} of run {run_id} is {cand['status']}: {cand['reason']}; "
            "only ok candidates (built, quality-checked and measured) can be exported"
        )
    return dict(cand)


def _variant_id(cand: dict[str, Any]) -> str:
    parts = [cand["runtime"], cand["precision"]] + ([cand["method"]] if cand["method"] else [])
    return "-".join(parts)


def _artifact_of(cand: dict[str, Any], run: RunFolder) -> dict[str, Any]:
    from bakeoff.cache import VARIANTS_FILE

    path = run.artifacts / VARIANTS_FILE
    try:
        variants = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"{path} is missing: the run was made by a bakeoff without export, or its "
            "folder was removed; run it again to export"
        ) from None
    vid = _variant_id(cand)
    if vid not in variants:
        raise UserError(f"{path} has no artifact for {vid}")
    return dict(variants[vid])


def _check_measured(src: Path, run: RunFolder) -> bool:
    """The run folder's file must still be the file that was measured; False when
    nothing was recorded to check it against (the user's own ONNX or IR file)."""
    from bakeoff.cache import ORIGIN_FILE

    if not src.is_file():
        raise UserError(f"artifact {src} is missing (was the run folder {run.path} cleaned up?)")
    artifacts = run.artifacts.resolve()
    try:
        rel = src.resolve().relative_to(artifacts)
    except ValueError:
        return False
    origin_path = artifacts / rel.parts[0] / ORIGIN_FILE
    if not origin_path.exists():
        return False
    files = json.loads(origin_path.read_text()).get("files", {})
    recorded = files.get(Path(*rel.parts[1:]).as_posix())
    if recorded is None:
        return False
    if sha256_file(src) != recorded["sha256"]:
        raise UserError(f"{src} changed after it was built and measured (sha256 differs)")
    return True


def _copy_artifact(cand: dict[str, Any], run: RunFolder, dest: Path) -> dict[str, Any]:
    """The measured file(s): the model file renamed model.onnx / model.xml, an IR's
    weights as model.bin, ONNX external data under the names the graph gives them."""
    from bakeoff.sizes import artifact_files

    artifact = _artifact_of(cand, run)
    src = Path(artifact["path"])
    if not src.is_file():
        raise UserError(f"artifact {src} is missing (was the run folder {run.path} cleaned up?)")
    main = _MAIN_FILE[cand["runtime"]]
    verified = True
    for f in artifact_files(src):
        if f == src:
            name = main
        elif f.suffix == ".bin" and main == "model.xml":
            name = "model.bin"
        else:
            name = f.relative_to(src.parent).as_posix()
        verified = _check_measured(f, run) and verified
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / name)
    return {
        "file": main,
        "exporter": artifact.get("exporter"),
        "dynamic_batch": True,
        # the files' sha256 match what the run recorded when it built them
        "model_verified_against_run": verified,
    }


def _torch_program(
    record: dict[str, Any],
    cand: dict[str, Any],
    run: RunFolder,
    examples: dict[str, np.ndarray],
    layout: Layout,
    dest: Path,
) -> dict[str, Any]:
    """The measured model, rebuilt the way the backend built it (BF16/FP16 autocast,
    INT4 weight-only layers...), as a torch.export program checked against it."""
    if cand["precision"] == "int8" and cand["method"] == "dynamic":
        raise UserError(
            f"candidate {cand['id']}: PyTorch dynamic INT8 cannot be saved as a "
            "torch.export program (its quantized Linear layers keep packed weights "
            "torch.export cannot serialize); export torch-fp32 and apply "
            "torch.ao.quantization.quantize_dynamic after loading, or another candidate"
        )
    import torch

    from bakeoff import cache
    from bakeoff.backends import LoadContext, Variant, torch_eager
    from bakeoff.loader import load_workload
    from bakeoff.models import first_output

    ref = record["settings"].get("workload_ref")
    if not ref:
        raise UserError(f"run {record['run_id']} does not say which workload it ran")
    source = load_workload(ref).source
    key_file = run.artifacts / cache.KEY_FILE
    verified = False
    if key_file.exists():
        measured = json.loads(key_file.read_text())["components"]["model"]
        if cache.model_hash(source)["hash"] != measured:
            raise UserError(
                f"the model of {ref} changed since run {record['run_id']} (its files hash "
                "differently): the export would not be the model that was measured; run again"
            )
        verified = True
    variant = Variant(cand["runtime"], cand["precision"], cand["method"])
    ctx = LoadContext(source, _threads(record, cand), int(cand["batch_size"]), tuple(examples))
    model, _ = torch_eager.load_model(variant, ctx)
    dtype = torch_eager.AUTOCAST_DTYPES.get(cand["precision"])

    class Measured(torch.nn.Module):
        """The model as it was called when measured (under autocast for BF16/FP16)."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            if dtype is None:
                return self.inner(*args)
            with torch.autocast("cpu", dtype=getattr(torch, dtype)):
                return self.inner(*args)

    wrapped = Measured(model).eval()

    def first(n: int) -> tuple[Any, ...]:
        # n samples along each input's batch axis; a constant as it is (0-d stays 0-d)
        cut = layout.contiguous(layout.cut(examples, 0, n))
        return tuple(torch.from_numpy(v) for v in cut.values())

    args = first(2)
    batch = torch.export.Dim("batch")
    per_input = tuple(None if (axis := layout.axis(n)) is None else {axis: batch} for n in examples)
    try:
        program = torch.export.export(wrapped, args, dynamic_shapes=(per_input,))
        dynamic = True
    except Exception:  # a model that specializes on batch: one shape, the measured one
        bs = int(cand["batch_size"])
        args = first(bs)
        try:
            program = torch.export.export(wrapped, args)
        except Exception as exc:
            raise UserError(
                f"candidate {cand['id']}: torch.export failed: {type(exc).__name__}: {exc}"
            ) from None
        dynamic = False
    with torch.no_grad():
        want = first_output(wrapped(*args)).float()
        got = first_output(program.module()(*args)).float()
    if not torch.allclose(want, got, rtol=1e-4, atol=1e-5):
        diff = float((want - got).abs().max())
        raise UserError(
            f"candidate {cand['id']}: the exported program differs from the model "
            f"(max abs difference {diff:.3g}); not exported"
        )
    torch.export.save(program, str(dest / "model.pt2"))
    return {
        "file": "model.pt2",
        "exporter": "torch.export",
        "dynamic_batch": dynamic,
        "model_verified_against_run": verified,
    }


def _threads(record: dict[str, Any], cand: dict[str, Any]) -> int:
    s = cand.get("settings") or {}
    for key in ("intra_op_threads", "INFERENCE_NUM_THREADS", "num_threads"):
        if isinstance(s.get(key), int):
            return int(s[key])
    return int((cand.get("options") or {}).get("threads") or record["settings"]["threads"])


def _load_config(cand: dict[str, Any], threads: int) -> dict[str, Any]:
    """What `load` applies: the measured settings, in the runtime's own terms."""
    s, opts = cand.get("settings") or {}, cand.get("options") or {}
    runtime = cand["runtime"]
    if runtime == "onnxruntime":
        return {
            "intra_op_num_threads": threads,
            "inter_op_num_threads": int(s.get("inter_op_threads", 1)),
            "graph_optimization_level": s.get("graph_optimization_level", "all"),
            "allow_spinning": s.get("allow_spinning", "default"),
        }
    if runtime == "openvino":
        config = {
            k: s[k]
            for k in (
                "INFERENCE_PRECISION_HINT",
                "INFERENCE_NUM_THREADS",
                "NUM_STREAMS",
                "PERFORMANCE_HINT",
            )
            if k in s
        }
        config.setdefault("INFERENCE_PRECISION_HINT", "f32")  # never OpenVINO's silent bf16
        config.setdefault("INFERENCE_NUM_THREADS", threads)
        return config
    if runtime == "litert":
        return {"num_threads": threads}
    compiled = None
    if runtime == "torch-compile":
        compiled = {
            "backend": s.get("compile_backend", "inductor"),
            "mode": s.get("compile_mode", opts.get("mode", "default")),
            "dynamic": bool(s.get("dynamic", opts.get("dynamic", False))),
        }
    return {"threads": threads, "compile": compiled}


def _manifest(
    record: dict[str, Any],
    cand: dict[str, Any],
    artifact: dict[str, Any],
    examples: dict[str, np.ndarray],
    layout: Layout,
    files: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    import bakeoff

    doc = record["document"] or {}
    env = record["environment"]
    runtime = cand["runtime"]
    threads = _threads(record, cand)
    bs = int(cand["batch_size"])
    q = cand.get("quality") or {}
    cpu = env.get("cpu", {})
    return {
        "format": FORMAT,
        "bakeoff_version": bakeoff.__version__,
        "exported_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "run_id": record["run_id"],
        "workload": (doc.get("workload") or {}).get("name", record["workload"]),
        "candidate": cand["id"],
        "label": cand.get("label"),
        "runtime": runtime,
        "package": _PACKAGE[runtime],
        "runtime_version": (env.get("packages") or {}).get(_PACKAGE[runtime]),
        "precision": cand["precision"],
        "method": cand["method"],
        "batch_size": bs,
        "file": artifact["file"],
        "exporter": artifact.get("exporter"),
        "dynamic_batch": artifact.get("dynamic_batch", True),
        "model_verified_against_run": artifact.get("model_verified_against_run"),
        "threads": threads,
        "settings": cand.get("settings") or {},
        "options": cand.get("options") or {},
        "load": _load_config(cand, threads),
        # batch_axis: where the batch is in `shape`; None for an input fed the same
        # to every call (a constant: `shape` is its own)
        "inputs": [
            {
                "name": n,
                "dtype": str(a.dtype),
                "shape": list(layout.batch_shape(n, a.shape, bs)),
                "batch_axis": layout.axis(n),
            }
            for n, a in examples.items()
        ],
        "output": "the model's first output, as float32",
        "quality": {k: q.get(k) for k in ("metric", "value", "reference", "drop", "max_drop")},
        "measured": {
            "latency_ms": {k: (cand.get("latency_ms") or {}).get(k) for k in ("p50", "p99")},
            "samples_per_s": (cand.get("throughput") or {}).get("samples_per_s"),
        },
        "files": files,
        "environment": {
            "cpu": cpu.get("model"),
            "physical_cores": cpu.get("physical_cores"),
            "cpu_flags": cpu.get("flags"),
            "platform": env.get("platform"),
            "python": env.get("python"),
            "bakeoff_version": env.get("bakeoff_version"),
            "packages": env.get("packages"),
        },
    }


# ---------------------------------------------------------------- load


class Predictor:
    """`predict(inputs)`: a dict of numpy arrays by input name -> the first output, float32."""

    def __init__(
        self, manifest: dict[str, Any], run: Callable[[dict[str, np.ndarray]], np.ndarray]
    ) -> None:
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


def load(path: str | Path) -> Predictor:
    """Load an export folder: check its files, import only its runtime, return `predict`."""
    folder = Path(path)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise UserError(f"{folder}: no {MANIFEST}; not a bakeoff export") from None
    if manifest.get("format") != FORMAT:
        raise UserError(f"{folder}: export format {manifest.get('format')} is not {FORMAT}")
    for name, info in manifest["files"].items():
        file = folder / name
        if not file.is_file():
            raise UserError(f"{folder}: {name} is missing")
        if sha256_file(file) != info["sha256"]:
            raise UserError(f"{folder}: {name} does not match its sha256 in {MANIFEST}")
    runtime = manifest["runtime"]
    loaders = {
        "onnxruntime": _load_onnxruntime,
        "openvino": _load_openvino,
        "torch": _load_torch,
        "torch-compile": _load_torch,
        "litert": _load_litert,
    }
    if runtime not in loaders:
        raise UserError(f"{folder}: runtime {runtime!r} has no loader here")
    return Predictor(manifest, loaders[runtime](folder, manifest))


def _load_onnxruntime(folder: Path, manifest: dict[str, Any]) -> Callable[..., np.ndarray]:
    import onnxruntime as ort

    from bakeoff.tensors import ONNX_NUMPY_TYPES

    cfg = manifest["load"]
    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(cfg["intra_op_num_threads"])
    opts.inter_op_num_threads = int(cfg["inter_op_num_threads"])
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = levels[cfg["graph_optimization_level"]]
    if isinstance(cfg.get("allow_spinning"), bool):
        opts.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if cfg["allow_spinning"] else "0"
        )
    session = ort.InferenceSession(
        str(folder / manifest["file"]), opts, providers=["CPUExecutionProvider"]
    )
    model_inputs = [(i.name, ONNX_NUMPY_TYPES.get(i.type)) for i in session.get_inputs()]

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(session.run(None, map_inputs(inputs, model_inputs))[0])

    return run


_OV_TYPES = {"f32": np.float32, "f16": np.float16, "i64": np.int64, "i32": np.int32}


def _load_openvino(folder: Path, manifest: dict[str, Any]) -> Callable[..., np.ndarray]:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(str(folder / manifest["file"])), "CPU", dict(manifest["load"])
    )
    request = compiled.create_infer_request()
    model_inputs = [
        (p.get_any_name(), _OV_TYPES.get(p.get_element_type().get_type_name()))
        for p in compiled.inputs
    ]

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(request.infer(map_inputs(inputs, model_inputs))[0])

    return run


def _load_torch(folder: Path, manifest: dict[str, Any]) -> Callable[..., np.ndarray]:
    import torch

    cfg = manifest["load"]
    torch.set_num_threads(int(cfg["threads"]))
    module: Any = torch.export.load(str(folder / manifest["file"])).module()
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


def manifest_layout(manifest: dict[str, Any]) -> Layout:
    """Where each input's batch is, as the manifest lists it (an older manifest,
    without batch_axis, had every input batched on axis 0)."""
    inputs = manifest["inputs"]
    return Layout(
        {i["name"]: int(i["batch_axis"]) for i in inputs if i.get("batch_axis") not in (0, None)},
        tuple(i["name"] for i in inputs if "batch_axis" in i and i["batch_axis"] is None),
    )


def _load_litert(folder: Path, manifest: dict[str, Any]) -> Callable[..., np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    from bakeoff.backends.litert import LiteRtRunner

    interpreter = Interpreter(
        model_path=str(folder / manifest["file"]),
        num_threads=int(manifest["load"]["num_threads"]),
    )
    runner = LiteRtRunner(interpreter, {})
    layout = manifest_layout(manifest)
    batch = [0]  # the batch size the interpreter's tensors are allocated for

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        n = layout.count(inputs)
        if n != batch[0]:  # converted with a dynamic batch axis: resize, then allocate
            # the array each interpreter input is fed from, as map_inputs matches them
            plain = [name for name, _ in runner.model_inputs]
            names = plain if set(plain) <= set(inputs) else list(inputs)
            for detail, name in zip(runner.inputs, names, strict=False):
                shape = layout.batch_shape(name, detail["shape"], n)
                interpreter.resize_tensor_input(detail["index"], list(shape))
            interpreter.allocate_tensors()
            runner.inputs = interpreter.get_input_details()
            runner.output = interpreter.get_output_details()[0]["index"]
            batch[0] = n
        return np.array(runner.run(runner.prepare(inputs)))  # a copy: the buffer is reused

    return run
