"""`bakeoff export --format triton`: the candidate as a model of a Triton Inference
Server model repository.

``DIR/<name>/1/`` holds the model file (the measured ``model.onnx`` for the
onnxruntime backend, ``model.xml`` + ``model.bin`` for the openvino backend, a
TorchScript ``model.pt`` traced from the measured torch model for the pytorch
backend) and ``DIR/<name>/config.pbtxt`` says how to serve it, each value from
the run:

- inputs and outputs by the model file's own names, with its datatypes and dims
  (-1 where an axis is free; without the batch axis when Triton batches);
- ``max_batch_size``, ``dynamic_batching`` and the instance count chosen from the
  variant's measurements by `bakeoff.export.auto` (as `bakeoff serve` with no
  ``--latency-bound-ms`` chooses them): only batch sizes whose p99 stays within
  ``auto.LATENCY_MULTIPLE`` times batch 1's, and a queue delay of at most batch 1's
  p50, which matters more here than in `bakeoff serve`: Triton's dynamic batcher
  waits out its delay for a lone request, so that is what such a request pays
  over batch 1; where batching does not pay, no ``dynamic_batching``, and a
  comment says why;
- the threads (and the other settings the backend can take) the candidate was
  measured with, as the backend's own parameters, looked up in each backend's
  documentation and source: onnxruntime_backend (``intra_op_thread_count``,
  ``inter_op_thread_count``, ``execution_mode``, ``optimization.graph.level``),
  openvino_backend (``INFERENCE_NUM_THREADS``, ``NUM_STREAMS``,
  ``PERFORMANCE_HINT``, ``HINT_BF16``, ``ENABLE_BATCH_PADDING``) and
  pytorch_backend (``INTRA_OP_THREAD_COUNT``, ``INTER_OP_THREAD_COUNT``).

A setting a backend cannot take is said in the file and in the manifest (a note),
never dropped silently; a candidate the backend cannot run as measured (OpenVINO
FP16, a torch model torch.jit.trace cannot trace) is refused with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import Layout
from bakeoff.errors import UserError
from bakeoff.export.auto import choose
from bakeoff.export.measured import MeasuredCandidate
from bakeoff.hardware import NATIVE

VERSION = "1"
CONFIG = "config.pbtxt"
# bakeoff runtime -> the Triton backend that runs its model file
BACKENDS = {
    "onnxruntime": "onnxruntime",
    "openvino": "openvino",
    "torch": "pytorch",
    "torch-compile": "pytorch",
}

# Triton's data types (model_config.proto's DataType), by each runtime's type names.
_ONNX_TYPES = {
    "FLOAT": "TYPE_FP32",
    "FLOAT16": "TYPE_FP16",
    "BFLOAT16": "TYPE_BF16",
    "DOUBLE": "TYPE_FP64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "BOOL": "TYPE_BOOL",
    "STRING": "TYPE_STRING",
}
_OPENVINO_TYPES = {
    "f32": "TYPE_FP32",
    "f16": "TYPE_FP16",
    "bf16": "TYPE_BF16",
    "f64": "TYPE_FP64",
    "i8": "TYPE_INT8",
    "i16": "TYPE_INT16",
    "i32": "TYPE_INT32",
    "i64": "TYPE_INT64",
    "u8": "TYPE_UINT8",
    "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32",
    "u64": "TYPE_UINT64",
    "boolean": "TYPE_BOOL",
    "string": "TYPE_STRING",
}
_NUMPY_TYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "float64": "TYPE_FP64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "bool": "TYPE_BOOL",
}
# onnxruntime_backend's optimization.graph.level for ONNX Runtime's level names
# ("all", ONNX Runtime's default and the backend's, is written as no level at all).
_ORT_GRAPH_LEVELS = {"basic": -1, "extended": 1, "disable": 2}


@dataclass(frozen=True)
class Tensor:
    """An input or output as config.pbtxt names it: its full shape, -1 where free."""

    name: str
    data_type: str
    shape: tuple[int, ...]


def model_name(workload: str) -> str:
    """The model's folder name in the repository (Triton's model name): the workload's
    name with anything but letters, digits, '_', '.' and '-' made '_'."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", workload).strip("._-") or "model"


def refuse_runtime(cand: dict[str, Any]) -> None:
    """A candidate no Triton backend runs as it was measured: refused with why."""
    runtime = cand["runtime"]
    if runtime not in BACKENDS:
        raise UserError(
            f"candidate {cand['id']}: --format triton writes {', '.join(BACKENDS)} "
            f"candidates (Triton's onnxruntime, openvino and pytorch backends), not "
            f"{runtime}; export it with the plain format, or choose one of those with "
            "--candidate ID"
        )
    hint = _openvino_hint(cand)
    if runtime == "openvino" and hint not in ("f32", "bf16"):
        raise UserError(
            f"candidate {cand['id']}: OpenVINO ran it with INFERENCE_PRECISION_HINT={hint}, "
            "and Triton's openvino backend takes no such hint (only HINT_BF16); served "
            "there it would not compute what was measured. Export it with the plain "
            "format (its manifest keeps the hint), or an f32/bf16 candidate with --candidate"
        )


def _openvino_hint(cand: dict[str, Any]) -> str:
    hint = str((cand.get("settings") or {}).get("INFERENCE_PRECISION_HINT", "f32")).lower()
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(hint, hint)


def model_tensors(backend: str, path: Path) -> tuple[list[Tensor], list[Tensor]]:
    """The inputs and outputs of the model file Triton will load, by its own names."""
    if backend == "onnxruntime":
        return _onnx_tensors(path)
    return _openvino_tensors(path)


def _onnx_tensors(path: Path) -> tuple[list[Tensor], list[Tensor]]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}

    def tensor(value: Any) -> Tensor:
        if not value.type.HasField("tensor_type"):
            raise UserError(f"{path.name}: {value.name} is not a tensor; Triton takes tensors")
        t = value.type.tensor_type
        type_name = onnx.TensorProto.DataType.Name(t.elem_type)
        if type_name not in _ONNX_TYPES:
            raise UserError(
                f"{path.name}: {value.name} is {type_name}, which Triton has no type for"
            )
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
        return Tensor(value.name, _ONNX_TYPES[type_name], dims)

    inputs = [tensor(v) for v in graph.input if v.name not in initializers]
    return inputs, [tensor(v) for v in graph.output]


def _openvino_tensors(path: Path) -> tuple[list[Tensor], list[Tensor]]:
    import openvino as ov

    model = ov.Core().read_model(str(path))

    def tensor(port: Any) -> Tensor:
        names = port.get_names()
        if not names:  # the backend matches config names against these
            raise UserError(
                f"{path.name}: a tensor has no name; Triton's openvino backend needs one"
            )
        name = port.get_any_name()
        type_name = port.get_element_type().get_type_name()
        if type_name not in _OPENVINO_TYPES:
            raise UserError(f"{path.name}: {name} is {type_name}, which Triton has no type for")
        shape = port.get_partial_shape()
        if shape.rank.is_dynamic:
            raise UserError(f"{path.name}: {name} has no fixed rank; Triton needs one")
        dims = tuple(d.get_length() if d.is_static else -1 for d in shape)
        return Tensor(name, _OPENVINO_TYPES[type_name], dims)

    return [tensor(p) for p in model.inputs], [tensor(p) for p in model.outputs]


def example_tensors(
    examples: dict[str, np.ndarray], layout: Layout, variable_axes: dict[str, list[int]]
) -> list[Tensor]:
    """The pytorch backend's inputs: the workload's, in order, named `<name>__<index>`
    (the backend's naming convention: it feeds forward()'s arguments by that index)."""
    tensors = []
    for i, (name, array) in enumerate(examples.items()):
        if str(array.dtype) not in _NUMPY_TYPES:
            raise UserError(f"input {name} is {array.dtype}, which the pytorch backend cannot take")
        free = {layout.axis(name), *variable_axes.get(name, [])}
        shape = tuple(-1 if axis in free else int(d) for axis, d in enumerate(array.shape))
        prefix = re.sub(r"_+", "_", name)  # the backend reads the index after the first "__"
        tensors.append(Tensor(f"{prefix}__{i}", _NUMPY_TYPES[str(array.dtype)], shape))
    return tensors


def torchscript(measured: MeasuredCandidate, dest: Path) -> dict[str, Any]:
    """Write ``model.pt``, the measured torch model traced to TorchScript (what Triton's
    pytorch backend loads), returning its first output as float32. Checked against the
    model at the measured batch size and at another one: a trace that fixed the batch
    size is kept with `dynamic_batch` False (Triton then does not batch it)."""
    import torch

    from bakeoff.export.program import as_measured, measured_model
    from bakeoff.models import first_output

    cand, examples, layout = measured.cand, measured.examples, measured.layout
    model, verified = measured_model(measured)
    as_called = as_measured(model, cand["precision"])

    class FirstOutput(torch.nn.Module):
        """The model's first output as float32: one tensor, as the backend returns it."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return first_output(self.inner(*args)).float()

    wrapped = FirstOutput(as_called).eval()
    bs = int(cand["batch_size"])

    def batch(n: int) -> tuple[Any, ...]:
        cut = layout.contiguous(layout.cut(examples, 0, n))
        return tuple(torch.from_numpy(v) for v in cut.values())

    why_not = (
        "export it with the plain format (a torch.export program), or an onnxruntime or "
        "openvino candidate with --candidate ID"
    )
    try:
        with torch.no_grad():
            traced = torch.jit.trace(wrapped, batch(bs), check_trace=False, strict=False)
    except Exception as exc:  # whatever the tracer raises on this model's code
        raise UserError(
            f"candidate {cand['id']}: Triton's pytorch backend loads TorchScript, and "
            f"torch.jit.trace failed on this model ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:300]}); {why_not}"
        ) from None
    path = dest / "model.pt"
    traced.save(str(path))
    loaded = torch.jit.load(str(path))  # what the backend will do, checked here
    if not _same(wrapped, loaded, batch(bs)):
        raise UserError(
            f"candidate {cand['id']}: the TorchScript trace computes other outputs than the "
            f"model at batch {bs}; {why_not}"
        )
    rows = layout.count(examples)
    other = bs + 1 if rows > bs else max(1, bs - 1)
    dynamic = other != bs and _same(wrapped, loaded, batch(other))
    with torch.no_grad():
        out = loaded(*batch(bs))
    return {
        "file": "model.pt",
        "exporter": "torch.jit.trace",
        "dynamic_batch": dynamic,
        "model_verified_against_run": verified,
        "output_shape": [int(d) for d in out.shape],
    }


def _same(model: Any, traced: Any, args: tuple[Any, ...]) -> bool:
    import torch

    with torch.no_grad():
        want = model(*args)
        try:
            got = traced(*args)
        except Exception:  # a trace that fixed a shape fails on another one
            return False
    return bool(want.shape == got.shape and torch.allclose(want, got, rtol=1e-4, atol=1e-5))


@dataclass(frozen=True)
class Config:
    """config.pbtxt's text, and what the manifest keeps of it."""

    text: str
    max_batch_size: int
    dynamic_batching: dict[str, Any] | None
    instances: int
    parameters: dict[str, str]
    why: list[str]
    notes: list[str]


def config(
    name: str,
    backend: str,
    inputs: list[Tensor],
    outputs: list[Tensor],
    not_batchable: str | None,
    cand: dict[str, Any],
    load_config: dict[str, Any],
    measured: list[dict[str, Any]],
    cpu_flags: list[str],
    header: list[str],
) -> Config:
    """The model's configuration: `not_batchable` says why Triton must not batch it
    (None when every input and output has a free batch axis first)."""
    not_batchable = not_batchable or _fixed_batch_axis(inputs + outputs)
    bs = int(cand["batch_size"])
    if not_batchable:
        # the requests run as they come, at the measured batch size; only the
        # instance count is chosen
        chosen = choose(measured, bs, bs, 0.0, None)
        max_batch_size = 0
        why = [f"max_batch_size 0, Triton does not batch: {not_batchable}", *chosen.why]
    else:
        chosen = choose(measured, bs, None, None, None)
        max_batch_size = chosen.max_batch_size
        why = list(chosen.why)
    dynamic = None
    if max_batch_size > 1:
        dynamic = {
            "preferred_batch_size": [max_batch_size],
            "max_queue_delay_microseconds": round(chosen.max_queue_delay_ms * 1000),
        }
        why.append(
            f"Triton waits out the delay for company, so a lone request pays up to "
            f"{chosen.max_queue_delay_ms:.2f} ms over its own run"
        )
    elif max_batch_size == 1:
        why.append("no dynamic_batching: batches of 1 (each request runs as it comes)")
    parameters, extra, notes = _backend_settings(
        backend, cand, load_config, max_batch_size, cpu_flags
    )
    lines = [f"# {h}" for h in header]
    lines += [f"name: {_quoted(name)}", f"backend: {_quoted(backend)}"]
    lines.append(f"max_batch_size: {max_batch_size}")
    batched = max_batch_size > 0
    lines += _tensor_lines("input", inputs, batched)
    lines += _tensor_lines("output", outputs, batched)
    lines += [f"# {w}" for w in why]
    if dynamic is not None:
        lines += [
            "dynamic_batching {",
            f"  preferred_batch_size: [ {max_batch_size} ]",
            f"  max_queue_delay_microseconds: {dynamic['max_queue_delay_microseconds']}",
            "}",
        ]
    lines += ["instance_group [", "  {", "    kind: KIND_CPU", f"    count: {chosen.instances}"]
    lines += ["  }", "]"]
    lines += extra
    lines += [f"# note: {n}" for n in notes]
    for key, value in parameters.items():
        lines.append(
            f"parameters {{ key: {_quoted(key)} value: {{ string_value: {_quoted(value)} }} }}"
        )
    return Config(
        "\n".join(lines) + "\n",
        max_batch_size,
        dynamic,
        chosen.instances,
        parameters,
        why,
        notes,
    )


def _fixed_batch_axis(tensors: list[Tensor]) -> str | None:
    for t in tensors:
        if not t.shape or t.shape[0] != -1:
            return f"{t.name}'s first axis is fixed ({list(t.shape)}), so it is no batch axis"
    return None


def _tensor_lines(kind: str, tensors: list[Tensor], batched: bool) -> list[str]:
    lines = [f"{kind} ["]
    for i, t in enumerate(tensors):
        dims = t.shape[1:] if batched else t.shape
        lines += [
            "  {",
            f"    name: {_quoted(t.name)}",
            f"    data_type: {t.data_type}",
            f"    dims: [ {', '.join(str(d) for d in dims)} ]",
            "  }" + ("," if i < len(tensors) - 1 else ""),
        ]
    return [*lines, "]"]


def _backend_settings(
    backend: str,
    cand: dict[str, Any],
    load_config: dict[str, Any],
    max_batch_size: int,
    cpu_flags: list[str],
) -> tuple[dict[str, str], list[str], list[str]]:
    """The measured settings as the backend's parameters; other config lines (ONNX
    Runtime's graph level); notes on what the backend cannot take."""
    notes: list[str] = []
    extra: list[str] = []
    if backend == "onnxruntime":
        params = {
            "intra_op_thread_count": str(load_config["intra_op_num_threads"]),
            "inter_op_thread_count": str(load_config["inter_op_num_threads"]),
            "execution_mode": "0",  # sequential, as bakeoff runs ONNX Runtime
        }
        level = str(load_config.get("graph_optimization_level", "all"))
        if level in _ORT_GRAPH_LEVELS:
            extra = [f"optimization {{ graph {{ level: {_ORT_GRAPH_LEVELS[level]} }} }}"]
        spinning = load_config.get("allow_spinning")
        if isinstance(spinning, bool):
            notes.append(
                f"measured with session.intra_op.allow_spinning={int(spinning)}, which "
                "the onnxruntime backend has no parameter for: ONNX Runtime's default applies"
            )
        return params, extra, notes
    if backend == "openvino":
        params = {
            k: str(load_config[k])
            for k in ("INFERENCE_NUM_THREADS", "NUM_STREAMS", "PERFORMANCE_HINT")
            if k in load_config
        }
        native = [f for f in NATIVE["bf16"] if f in cpu_flags]
        if _openvino_hint(cand) == "bf16":
            params["HINT_BF16"] = "YES"
        elif native:
            notes.append(
                "measured with INFERENCE_PRECISION_HINT=f32; the openvino backend takes no "
                "f32 hint (only HINT_BF16), and OpenVINO runs f32 models in bf16 by default "
                f"on a CPU with {'/'.join(native)} like the run's: served on such a CPU it "
                "computes in bf16, not as measured (the onnxruntime backend keeps f32)"
            )
        if max_batch_size > 1:
            # The backend compiles the model for batches of exactly max_batch_size and
            # refuses smaller ones unless it may pad them.
            params["ENABLE_BATCH_PADDING"] = "YES"
            notes.append(
                f"the openvino backend runs batches of exactly {max_batch_size}: smaller ones "
                "are padded (ENABLE_BATCH_PADDING), at a full batch's cost"
            )
        return params, extra, notes
    settings = cand.get("settings") or {}
    params = {
        "INTRA_OP_THREAD_COUNT": str(load_config["threads"]),
        "INTER_OP_THREAD_COUNT": str(settings.get("inter_op_threads", 1)),
    }
    notes.append(
        "the pytorch backend sets its thread counts once for the whole server, from the "
        "first model that gives them"
    )
    if load_config.get("compile"):
        c = load_config["compile"]
        notes.append(
            f"measured under torch.compile (backend {c['backend']}, mode {c['mode']}); the "
            "TorchScript program runs without it, so its speed is not the measured one"
        )
    return params, extra, notes


def _quoted(text: str) -> str:
    """A protobuf text-format string literal (octal escapes for anything unusual)."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        if char in '"\\' or not 32 <= byte < 127:
            out.append(f"\\{byte:03o}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
