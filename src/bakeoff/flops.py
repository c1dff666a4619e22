"""The FLOPs a sample costs: the multiply-adds of the model's ONNX graph.

MatMul, Gemm, Conv (and their quantized forms), ConvTranspose, two-operand Einsum and
the ONNX Attention operator are counted; attention that the exporter wrote out (as
torch's does at opset 18) is counted as its MatMuls. Elementwise operators, softmax
and norms are not: the peak the count is compared with (`bakeoff.efficiency`) is a
GEMM's, and they are not GEMM work. A graph with GEMM work the count cannot size
gets no count rather than a low one.

Heavy libraries (onnx_ir, onnxscript) are imported inside the functions.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)


class _Uncountable(Exception):
    """The graph holds work the count cannot see or size: the count would be low."""


# ---------------------------------------------------------------- FLOPs per sample

# op_type -> (index of the activation A, index of the weight B): the quantized forms
# take their scales and zero points between them.
_MATMULS = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3)}
_CONVS = {"Conv": (0, 1), "ConvInteger": (0, 1), "QLinearConv": (0, 3)}
_COUNTED = {*_MATMULS, *_CONVS, "Gemm", "ConvTranspose", "Einsum", "Attention"}
# In another domain (com.microsoft's fused operators, say) a name with one of these
# in it is GEMM work this count does not know how to size.
_GEMM_WORDS = ("MatMul", "Gemm", "Conv", "Attention")


def flops_per_sample(
    onnx_path: str | os.PathLike[str],
    shapes: Mapping[str, Sequence[int]] | None = None,
    batch_size: int = 1,
) -> int | None:
    """FLOPs (2 per multiply-add) of one sample through the ONNX graph at `onnx_path`.

    `shapes` gives each graph input's full shape for one call of `batch_size`
    samples; the count at those shapes is divided by `batch_size`. Without `shapes`
    the graph's own input shapes are used, with a dynamic first axis taken as
    `batch_size`. None when the count would be wrong: an input axis of unknown
    size, an operator whose shapes inference cannot settle, GEMM work inside a
    loop or branch or an operator of another domain, a graph with no GEMM work at
    all (a GEMM peak says nothing about it), or a file that does not load.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    try:
        total = _graph_flops(str(onnx_path), shapes, batch_size)
    except _Uncountable as exc:
        log.info("FLOPs of %s not counted: %s", onnx_path, exc)
        return None
    except Exception as exc:
        # A figure beside the measurement must never fail the run that measured it:
        # a file the ONNX tools cannot read or infer has no count.
        log.info("FLOPs of %s not counted: %s: %s", onnx_path, type(exc).__name__, exc)
        return None
    if total <= 0:
        return None
    return round(total / batch_size)


def _graph_flops(path: str, shapes: Mapping[str, Sequence[int]] | None, batch_size: int) -> int:
    """The count at one call's shapes.

    onnx-tool 1.0.1 (a ready-made counter) installs beside our pins, but its own
    shape engine fails on the MiniLM export that bakeoff ships (its Squeeze
    mishandles negative axes) and it counts MACs with bias and elementwise work mixed
    in; ONNX's own shape inference leaves the batch axis unknown past the `Range`
    that transformers' attention masks use. So: onnxscript's constant folder (the
    torch exporter's own optimizer) first turns every shape computation of the fixed
    input shapes into constants, then ONNX shape inference sizes every tensor, and
    the count below reads them.
    """
    import onnx_ir as ir
    import onnxscript.optimizer
    from onnx_ir.passes.common import InlinePass, ShapeInferencePass

    model = ir.load(path)
    InlinePass()(model)  # a model-local function's MatMuls count like any other
    graph = model.graph
    initializers = set(graph.initializers)
    for value in graph.inputs:
        if value.name in initializers:
            continue  # an initializer listed as an input (older exporters): a weight
        value.shape = ir.Shape(_input_shape(value, shapes, batch_size))
    # The exporter's shapes carry its symbolic batch; they are inferred again below
    # from the fixed inputs, so none is left to merge with the new ones.
    for node in ir.traversal.RecursiveGraphIterator(graph):
        for out in node.outputs:
            out.shape = None
    # The folder logs each node it tried and could not fold (MiniLM's mask has some)
    # as a warning; what it leaves unfolded shows up below as an unknown shape.
    folder_log = logging.getLogger("onnxscript.optimizer._constant_folding")
    level = folder_log.level
    folder_log.setLevel(logging.ERROR)
    try:
        onnxscript.optimizer.fold_constants(model, should_fold=_fold_small_fills)
    finally:
        folder_log.setLevel(level)
    ShapeInferencePass(strict_mode=False)(model)

    total = 0
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain not in ("", "ai.onnx"):
            if any(word in node.op_type for word in _GEMM_WORDS):
                raise _Uncountable(f"{node.domain}.{node.op_type} is not counted")
            continue
        if node.op_type not in _COUNTED:
            continue
        if node.graph is not model.graph:
            # A loop's body runs a data-dependent number of times; a branch may not
            # run at all.
            raise _Uncountable(f"{node.op_type} {node.name!r} is inside a loop or branch")
        total += _node_flops(node)
    return total


def _fold_small_fills(node: Any) -> bool | None:
    """The folder keeps ConstantOfShape by default (a model it writes stays small), but
    the TorchScript exporter builds the shape of an `expand` from one: in MiniLM's
    export the buffered token_type_ids take the batch from a Where over a
    ConstantOfShape, and left unfolded, every tensor after it has an unknown batch.
    Folded where its output is small; anything else as the folder decides."""
    if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx"):
        return None
    shape = node.inputs[0].const_value if node.inputs else None
    if shape is None:
        return None
    return True if math.prod(int(d) for d in shape.numpy().ravel()) <= _SMALL_FILL else None


_SMALL_FILL = 4096  # elements: shape vectors and masks, never a weight


def _input_shape(
    value: Any, shapes: Mapping[str, Sequence[int]] | None, batch_size: int
) -> list[int]:
    if shapes is not None and value.name in shapes:
        return [int(d) for d in shapes[value.name]]
    if value.shape is None:
        raise _Uncountable(f"input {value.name!r} has no declared shape")
    dims = []
    for axis, dim in enumerate(value.shape):
        if isinstance(dim, int):
            dims.append(dim)
        elif axis == 0:
            dims.append(batch_size)
        else:
            raise _Uncountable(f"input {value.name!r} axis {axis} ({dim}) has no given size")
    return dims


def _dims(node: Any, value: Any) -> list[int]:
    """A tensor's static shape, or `_Uncountable`."""
    shape = None if value is None else value.shape
    if shape is None or not shape.is_static():
        what = "a missing input" if value is None else repr(value.name)
        raise _Uncountable(f"{node.op_type} {node.name!r}: the shape of {what} is unknown")
    return [int(d) for d in shape]


def _attr(node: Any, name: str, default: Any) -> Any:
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def _input(node: Any, index: int) -> Any:
    return node.inputs[index] if index < len(node.inputs) else None


def _node_flops(node: Any) -> int:
    op = node.op_type
    out = _dims(node, node.outputs[0])
    if op in _MATMULS:
        # Y = A @ B: every output element is a K-long dot product (1-D A too: K = A[-1]).
        return 2 * math.prod(out) * _dims(node, _input(node, _MATMULS[op][0]))[-1]
    if op == "Gemm":
        a = _dims(node, _input(node, 0))
        k = a[0] if _attr(node, "transA", 0) else a[1]
        return 2 * math.prod(out) * k  # 2*M*N*K; the bias add is not GEMM work
    if op in _CONVS:
        # 2 * N*Cout*Hout*Wout * (Cin/groups)*kh*kw: the weight is [Cout, Cin/groups, k...]
        weight = _dims(node, _input(node, _CONVS[op][1]))
        return 2 * math.prod(out) * math.prod(weight[1:])
    if op == "ConvTranspose":
        # Each input element meets (Cout/groups)*k... weights: [Cin, Cout/groups, k...].
        x, w = _dims(node, _input(node, 0)), _dims(node, _input(node, 1))
        return 2 * math.prod(x) * math.prod(w[1:])
    if op == "Einsum":
        return _einsum_flops(node)
    if op == "Attention":
        return _attention_flops(node, out)
    raise AssertionError(op)


def _einsum_flops(node: Any) -> int:
    equation = str(_attr(node, "equation", "")).replace(" ", "")
    terms = equation.partition("->")[0].split(",")
    if len(terms) == 1:
        return 0  # a transpose, trace or sum: no multiplications to speak of
    if len(terms) != 2:
        raise _Uncountable(f"Einsum {node.name!r} of {len(terms)} operands")
    sizes: dict[str, int] = {}
    for index, term in enumerate(terms):
        dims = _dims(node, _input(node, index))
        head, ellipsis, tail = term.partition("...")
        n = len(dims) - len(head) - len(tail)
        # Ellipsis axes broadcast from the right: name them by their distance from its end.
        labels = [*head, *(f".{n - i}" for i in range(n) if ellipsis), *tail]
        for label, dim in zip(labels, dims, strict=True):
            sizes[label] = max(sizes.get(label, 1), dim)
    output = equation.partition("->")[2]
    contracted = any(label not in output for label in sizes if not label.startswith("."))
    # One multiply per point of the joint index space, and an add where a label is
    # summed away (ij,jk->ik: 2*i*j*k; ij,ij->ij: i*j).
    return (2 if contracted else 1) * math.prod(sizes.values())


def _attention_flops(node: Any, out: list[int]) -> int:
    """ONNX Attention (opset 23): Q·Kᵀ costs 2·Lkv per element of Q, softmax·V 2·Lkv
    per element of Y, in its 4-D [B, H, L, D] and 3-D [B, L, H·D] layouts alike."""
    q = _dims(node, _input(node, 0))
    present = node.outputs[1] if len(node.outputs) > 1 else None
    if present is not None and present.shape is not None and present.shape.is_static():
        keys = _dims(node, present)  # past and new keys together
        kv_len = keys[-2]
    else:
        k = _dims(node, _input(node, 1))
        kv_len = k[-2] if len(k) == 4 else k[1]
        past = _input(node, 4)
        if past is not None and past.name:
            kv_len += _dims(node, past)[-2]
    return 2 * kv_len * (math.prod(q) + math.prod(out))
