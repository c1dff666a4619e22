"""torch -> ONNX, with the TorchScript exporter first and the dynamo exporter as fallback.

The TorchScript exporter goes first because it is the one that pays: on MiniLM
(2 cores) it exports in 1.3 s against the dynamo exporter's 13.5 s, to a graph with
the same outputs (within 2e-7) that ONNX Runtime runs no slower (18 against 21 ms at
batch 1), since ORT's transformer fusions match the patterns it writes. The dynamo
exporter takes the models it cannot trace.

The batch axis is dynamic so one file serves every batch size, and so are the
axes the workload declares variable (a sequence length, say); an export that pins
one is refused and the other exporter tried. When both exporters fail, the reason
names the operator that stopped them.
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import Layout
from bakeoff.source import ModelSource
from bakeoff.transforms import StepFailed, cached_step

OPSET = 18
_OPERATOR_PATTERNS = (
    # TorchScript exporter: "Exporting the operator 'aten::foo' to ONNX opset ..."
    re.compile(r"operator '([\w:.]+)'"),
    # dynamo exporter / torch.export: "aten.foo.default", "mylib.op.default", "mylib::op"
    re.compile(r"\b([a-z_][\w]*::[\w.]+)"),
    re.compile(r"\b((?:aten|prims|[a-z_]+lib[\w]*)\.[\w]+(?:\.[\w]+)?)\b"),
    re.compile(r"OpOverload\(op='([\w.:]+)'"),
)


def operator_in(message: str) -> str | None:
    """The first operator name an exporter's error message mentions."""
    for pattern in _OPERATOR_PATTERNS:
        m = pattern.search(message)
        if m:
            return m.group(1)
    return None


def ensure_onnx(source: ModelSource, artifacts_dir: str, example: dict[str, np.ndarray]) -> dict:
    """The FP32 ONNX file of the workload's model: {"path", "exporter"}."""
    if source.kind == "onnx":
        assert source.path is not None
        return {"path": source.path, "exporter": "user-provided"}
    if source.kind == "keras":  # Keras' own exporter, in transforms/keras_export.py
        from bakeoff.transforms.keras_export import onnx_from_keras

        return onnx_from_keras(source, artifacts_dir, example)
    return cached_step(artifacts_dir, "onnx-fp32", lambda out: _export(source, example, out))


def _output_axes(model: Any, args: tuple[Any, ...], batch: int) -> dict[str, dict[int, str]]:
    """The model's outputs named as the torch runner names them ("output", or a
    dict's keys: bakeoff.tensors.named_outputs), so the quality gate matches each
    ONNX output to the reference's by name; each batched on axis 0 gets a dynamic
    batch axis."""
    import torch

    from bakeoff.tensors import named_outputs

    with torch.no_grad():
        found = [(n, t) for n, t in named_outputs(model(*args)) if isinstance(t, torch.Tensor)]
    return {
        name: {0: "batch"} if t.ndim and t.shape[0] == batch else {}
        for name, t in (found or [("output", torch.zeros(()))])
    }


def _export(source: ModelSource, example: dict[str, np.ndarray], out_dir: Path) -> dict:
    import torch

    from bakeoff.models import build_torch_model

    model = build_torch_model(source)
    layout = Layout.of(source)
    names = list(example)
    # np.asarray keeps a 0-d constant 0-d (np.ascontiguousarray would make it 1-d).
    args = tuple(torch.from_numpy(np.asarray(example[n], order="C")) for n in names)
    # Per input, the axes that stay dynamic: its batch axis, then its variable axes.
    dynamic = {
        n: [axis, *source.variable_axes.get(n, [])]
        for n in names
        if (axis := layout.axis(n)) is not None
    }
    outputs = _output_axes(model, args, layout.count(example))
    path = out_dir / "model.onnx"
    errors: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                model,
                args,
                str(path),
                input_names=names,
                output_names=list(outputs),
                opset_version=OPSET,
                dynamo=False,
                dynamic_axes={
                    **{
                        n: {a: "batch" if i == 0 else f"axis{a}" for i, a in enumerate(axes)}
                        for n, axes in dynamic.items()
                    },
                    **outputs,
                },
            )
            _check_loads(path)
            _check_dynamic_axes(path, dynamic)
            return {"path": str(path), "exporter": "torchscript"}
        except Exception as exc:
            errors.append(f"torchscript exporter: {type(exc).__name__}: {_first_lines(exc)}")
        try:
            program = torch.onnx.export(
                model,
                args,
                input_names=names,
                output_names=list(outputs),
                opset_version=OPSET,
                dynamo=True,
                dynamic_shapes=_dynamic_shapes(model, names, dynamic),
                external_data=False,
                verbose=False,
            )
            assert program is not None
            program.save(str(path))
            _check_loads(path)
            _check_dynamic_axes(path, dynamic)
            return {"path": str(path), "exporter": "dynamo"}
        except Exception as exc:
            errors.append(f"dynamo exporter: {type(exc).__name__}: {_first_lines(exc)}")
    op = next((o for o in map(operator_in, errors) if o), None)
    head = f"ONNX export failed on operator {op}" if op else "ONNX export failed"
    # Both exporters' errors follow; the full texts are in the build log.
    raise StepFailed(head + "; " + " | ".join(errors))


def _dynamic_shapes(
    model: Any, names: list[str], dynamic: dict[str, list[int]]
) -> dict[str, dict[int, Any] | None]:
    """Per input, its batch axis (the first of `dynamic[name]`) and its variable axes.

    One batch Dim shared by every batched input, on whichever axis each has it; one
    Dim per variable axis index, shared by the inputs that have it (input_ids and
    attention_mask share a length); None (static) for a constant.
    """
    import torch

    batch = torch.export.Dim("batch")
    dims: dict[int, Any] = {}

    def dim(axis: int) -> Any:
        return dims.setdefault(axis, torch.export.Dim(f"axis{axis}"))

    return {
        arg: (
            {axes[0]: batch, **{axis: dim(axis) for axis in axes[1:]}}
            if (axes := dynamic.get(name)) is not None
            else None
        )
        for arg, name in zip(_forward_arg_names(model, names), names, strict=True)
    }


def _check_dynamic_axes(path: Path, dynamic: dict[str, list[int]]) -> None:
    """torch.export specializes a dimension the model's code pins (int(x.shape[1]),
    say) and exports it fixed, without an error: catch that here, for the batch axis
    (the first of each input's list) and the declared variable axes."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    fixed = [
        f"axis {axis} of {inp.name}{' (its batch)' if i == 0 else ''} is fixed at "
        f"{dims[axis].dim_value}"
        for inp in graph.input
        if inp.name in dynamic
        for dims in [inp.type.tensor_type.shape.dim]
        for i, axis in enumerate(dynamic[inp.name])
        if axis < len(dims) and not dims[axis].dim_param
    ]
    if fixed:
        raise ValueError(
            "declared variable but exported fixed: "
            + "; ".join(fixed)
            + " (the model's code pins that length)"
        )


def _forward_arg_names(model: Any, fallback: list[str]) -> list[str]:
    """dynamic_shapes keys must be forward's own argument names."""
    import inspect

    params = [
        p.name
        for p in inspect.signature(model.forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return params[: len(fallback)] if len(params) >= len(fallback) else fallback


def _check_loads(path: Path) -> None:
    import onnx

    onnx.checker.check_model(str(path))


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_lines(exc: BaseException, limit: int = 240) -> str:
    """The gist of an exporter error; the whole text goes to the build log."""
    text = _ANSI.sub("", str(exc))
    print(f"--- {type(exc).__name__} ---\n{text}", file=sys.stderr)
    if "## Exception summary" in text:  # the dynamo exporter puts its advice first
        text = text.split("## Exception summary", 1)[1]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
