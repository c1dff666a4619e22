"""Writing an export folder: the candidate chosen from a run, its measured files copied
(or, for torch, written as a torch.export program by `program`), the manifest."""

from __future__ import annotations

import datetime
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import read_split, split_names
from bakeoff.cache import sha256_file
from bakeoff.errors import UserError
from bakeoff.export import tfserving, triton
from bakeoff.export.files import (
    artifact_of,
    copy_artifact,
    copy_tokenizer,
    tokenized,
    variant_id,
)
from bakeoff.export.measured import MeasuredCandidate
from bakeoff.export.predictor import FORMAT, MANIFEST
from bakeoff.export.program import measured_source, torch_program
from bakeoff.judge.verdict import chosen
from bakeoff.paths import RunFolder
from bakeoff.store import refuse_generative

EXPORTABLE = ("onnxruntime", "openvino", "torch", "torch-compile", "litert")
FORMATS = ("plain", "triton", "tfserving")
# The package whose version the run recorded, per runtime.
_PACKAGE = {
    "onnxruntime": "onnxruntime",
    "openvino": "openvino",
    "torch": "torch",
    "torch-compile": "torch",
    "litert": "ai-edge-litert",
    "keras-jax": "keras",
    "keras-tensorflow": "keras",
    "keras-torch": "keras",
    "tensorflow": "tensorflow-cpu",
}
# The exported name of a runtime's model file (its side files keep theirs).


def export(
    run_id: str,
    out: str | Path,
    candidate_id: str | None = None,
    store: str | Path | None = None,
    format: str = "plain",
) -> dict[str, Any]:
    """Write candidate `candidate_id` of run `run_id` (default: the winner of the run's
    first verdict) under `out` in `format`: "plain" (the folder `out`), "triton" or
    "tfserving" (the model `out`/<name>/ of a model repository); return its manifest."""
    from bakeoff import api
    from bakeoff.paths import DEFAULT_STORE

    if format not in FORMATS:
        raise UserError(f"--format {format!r}: expected one of {', '.join(FORMATS)}")
    store_path = Path(store if store is not None else DEFAULT_STORE)
    record = api.show_run(run_id, store_path)
    refuse_generative(record, "bakeoff export")
    run_id = record["run_id"]
    cand = _choose(record, candidate_id)
    out_dir = Path(out)
    _refuse_runtime(cand, format)
    workload = ((record["document"] or {}).get("workload") or {}).get("name", record["workload"])
    # plain: the folder itself; a model repository: the model's folder in it, beside
    # the models it may hold already
    target = out_dir if format == "plain" else out_dir / triton.model_name(str(workload))
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        what = "" if target == out_dir else f" holds {target.name}/ already, and it"
        raise UserError(f"--out {out_dir}:{what} exists and is not an empty folder")
    run = RunFolder.of(store_path, run_id)
    data_path = run.data
    if not data_path.exists():
        raise UserError(f"run {run_id}: its folder {run.path} is gone (data.npz is missing)")
    with np.load(data_path, allow_pickle=False) as z:
        names = split_names(z.files, "quality")
    examples, layout = read_split(data_path, "quality", names)
    measured = MeasuredCandidate(record, cand, run, examples, layout)

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.export-{secrets.token_hex(3)}"
    tmp.mkdir()
    try:
        text = None
        if format == "triton":
            artifact, described = _triton(measured, target.name, tmp)
        elif format == "tfserving":
            artifact, described = _tfserving(measured, target.name, tmp)
        else:
            artifact, described = _plain(measured, tmp), None
            text = copy_tokenizer(record, tmp)
        files = {
            p.relative_to(tmp).as_posix(): {"sha256": sha256_file(p), "bytes": p.stat().st_size}
            for p in sorted(tmp.rglob("*"))
            if p.is_file()
        }
        manifest = _manifest(measured, artifact, files)
        manifest["outputs"] = _outputs(cand, run)
        manifest["text"] = text
        candidates = (record["document"] or {}).get("candidates", [])
        manifest["measured_by_batch_size"] = variant_measurements(candidates, cand)
        if described is not None:
            if tokenized(record):
                described["notes"].append(
                    "the run tokenized text for this model; the server takes token ids (its "
                    "tokenizer is not part of the repository; the plain format copies it)"
                )
            manifest["layout"] = described
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        if target.exists():
            target.rmdir()  # empty, checked above
        os.rename(tmp, target)  # whole or absent: never half an export under `out`
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _refuse_runtime(cand: dict[str, Any], format: str) -> None:
    if format == "triton":
        triton.refuse_runtime(cand)
    elif format == "tfserving":
        tfserving.refuse_runtime(cand)
    elif cand["runtime"] not in EXPORTABLE:
        tf = cand["runtime"] in tfserving.RUNTIMES
        raise UserError(
            f"candidate {cand['id']}: bakeoff export writes {', '.join(EXPORTABLE)} "
            f"candidates, not {cand['runtime']}"
            + (" (--format tfserving writes it as a SavedModel)" if tf else "")
        )


def _plain(measured: MeasuredCandidate, dest: Path) -> dict[str, Any]:
    """The plain export's model file(s) in `dest`."""
    if measured.cand["runtime"] in ("torch", "torch-compile"):
        return torch_program(measured, dest)
    return copy_artifact(measured.cand, measured.run, dest)


def _triton(
    measured: MeasuredCandidate, name: str, dest: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's folder of a Triton model repository in `dest`: the model file in
    its version folder, config.pbtxt beside it."""
    record, cand, run = measured.record, measured.cand, measured.run
    examples, layout = measured.examples, measured.layout
    backend = triton.BACKENDS[cand["runtime"]]
    version = dest / triton.VERSION
    version.mkdir()
    threads = measured.threads
    doc = record["document"] or {}
    variable_axes = dict((doc.get("workload") or {}).get("variable_axes") or {})
    # Triton batches on the first axis of every input: a constant, or a batch on
    # another axis, leaves the batching to the client.
    off_axis = [n for n in examples if layout.axis(n) != 0]
    not_batchable = (
        f"input(s) {', '.join(off_axis)} have no batch on their first axis (a constant, or "
        "a batch on another axis)"
        if off_axis
        else None
    )
    if backend == "pytorch":
        artifact = triton.torchscript(measured, version)
        inputs = triton.example_tensors(examples, layout, variable_axes)
        shape = tuple(artifact.pop("output_shape"))  # at the measured batch size
        if artifact["dynamic_batch"]:
            shape = (-1, *shape[1:])
        else:
            not_batchable = not_batchable or "the TorchScript trace fixed the batch size"
        outputs = [triton.Tensor("output__0", "TYPE_FP32", shape)]
    else:
        artifact = copy_artifact(cand, run, version)
        inputs, outputs = triton.model_tensors(backend, version / artifact["file"])
    cpu_flags = list(((record["environment"] or {}).get("cpu") or {}).get("flags") or [])
    header = [
        f"bakeoff export --format triton: candidate {cand['id']} of run {record['run_id']} "
        f"({cand['runtime']}, {cand['precision']}), measured with {threads} thread(s)",
    ]
    candidates = doc.get("candidates", [])
    config = triton.config(
        name=name,
        backend=backend,
        inputs=inputs,
        outputs=outputs,
        not_batchable=not_batchable,
        cand=cand,
        load_config=_load_config(cand, threads),
        measured=variant_measurements(candidates, cand),
        cpu_flags=cpu_flags,
        header=header,
    )
    (dest / triton.CONFIG).write_text(config.text)
    artifact["file"] = f"{triton.VERSION}/{artifact['file']}"
    described = {
        "format": "triton",
        "model_name": name,
        "backend": backend,
        "config": triton.CONFIG,
        "version": triton.VERSION,
        "inputs": [_tensor_info(t) for t in inputs],
        "outputs": [_tensor_info(t) for t in outputs],
        "max_batch_size": config.max_batch_size,
        "dynamic_batching": config.dynamic_batching,
        "instances": config.instances,
        "parameters": config.parameters,
        "why": config.why,
        "notes": config.notes,
    }
    return artifact, described


def _tensor_info(t: triton.Tensor) -> dict[str, Any]:
    return {"name": t.name, "data_type": t.data_type, "shape": list(t.shape)}


def _tfserving(
    measured: MeasuredCandidate, name: str, dest: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's folder for TF Serving in `dest`: the SavedModel as version 1."""
    record, cand, run = measured.record, measured.cand, measured.run
    source, verified = measured_source(record, run)
    artifact = {} if source.kind == "savedmodel" else artifact_of(cand, run)
    doc = record["document"] or {}
    variable_axes = dict((doc.get("workload") or {}).get("variable_axes") or {})
    saved = tfserving.savedmodel(
        record,
        cand,
        source,
        artifact,
        run.data,
        list(measured.examples),
        variable_axes,
        dest / tfserving.VERSION,
    )
    load_config = _load_config(cand, measured.threads)
    notes = []
    if cand["runtime"] in ("keras-jax", "keras-torch"):
        notes.append(
            f"measured on {cand['runtime']}; the SavedModel runs the same model and weights "
            "on TensorFlow, which this candidate's figures do not measure"
        )
    described = {
        "format": "tfserving",
        "model_name": name,
        **saved,
        "version": tfserving.VERSION,
        "server_flags": [
            f"--tensorflow_intra_op_parallelism={load_config['threads']}",
            f"--tensorflow_inter_op_parallelism={load_config['inter_op_threads']}",
        ],
        "notes": notes,
    }
    artifact = {
        "file": tfserving.VERSION,
        "exporter": saved.get("exporter"),
        "dynamic_batch": True,
        "model_verified_against_run": verified,
    }
    return artifact, described


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
        if not chosen(verdict):
            raise UserError(
                f"run {run_id}: the batch-{verdict['batch_size']} verdict has no winner "
                f"({verdict.get('reason')}); name a candidate with --candidate ID"
            )
        candidate_id = str(chosen(verdict))
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


def _outputs(cand: dict[str, Any], run: RunFolder) -> list[dict[str, Any]] | None:
    """The one output `load` returns, with its shape at the candidate's batch size
    (read from the outputs the quality gate judged); None when those are gone."""
    path = run.outputs / f"{cand['id']}.npy"
    if not path.is_file():
        return None
    shape = np.load(path, mmap_mode="r", allow_pickle=False).shape
    return [{"name": "output", "dtype": "float32", "shape": [int(cand["batch_size"]), *shape[1:]]}]


def variant_measurements(
    candidates: list[dict[str, Any]], cand: dict[str, Any]
) -> list[dict[str, Any]]:
    """The figures of `cand`'s variant at every batch size the run measured it (its
    ok candidates in the result document), so a server can choose its batching from
    them (`bakeoff serve --max-batch-size auto`). Hand-written candidates of one
    variant with their own labels (other options) are not the same variant here."""
    key = (variant_id(cand), cand.get("label"))
    rows = []
    for c in candidates:
        if c["status"] != "ok" or (variant_id(c), c.get("label")) != key:
            continue
        if not c.get("latency_ms"):
            continue
        best = (c.get("offline") or {}).get("best") or {}
        rows.append(
            {
                "candidate": c["id"],
                "batch_size": int(c["batch_size"]),
                "p50_ms": c["latency_ms"].get("p50"),
                "p99_ms": c["latency_ms"].get("p99"),
                "samples_per_s": (c.get("throughput") or {}).get("samples_per_s"),
                "offline_streams": best.get("concurrency"),
                "offline_samples_per_s": best.get("samples_per_s"),
            }
        )
    return sorted(rows, key=lambda r: r["batch_size"])


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
    if runtime in tfserving.RUNTIMES:  # TF Serving's flags (the manifest's layout says them)
        return {"threads": threads, "inter_op_threads": int(s.get("inter_op_threads", 1))}
    compiled = None
    if runtime == "torch-compile":
        compiled = {
            "backend": s.get("compile_backend", "inductor"),
            "mode": s.get("compile_mode", opts.get("mode", "default")),
            "dynamic": bool(s.get("dynamic", opts.get("dynamic", False))),
        }
    return {"threads": threads, "compile": compiled}


def _manifest(
    measured: MeasuredCandidate, artifact: dict[str, Any], files: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    import bakeoff

    record, cand = measured.record, measured.cand
    examples, layout = measured.examples, measured.layout
    doc = record["document"] or {}
    env = record["environment"]
    runtime = cand["runtime"]
    threads = measured.threads
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
