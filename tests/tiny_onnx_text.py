"""A tiny ONNX text model written with onnx.helper (no exporter, no torch): int64
`input_ids` [batch, seq] index a 1000-row embedding table, `attention_mask` masks
them, a mean over the sequence and a 16x4 MatMul give `logits` [batch, 4]."""

from __future__ import annotations

from pathlib import Path

import numpy as np

VOCABULARY = 1000


def write_tiny_onnx_text(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    constants = [
        numpy_helper.from_array(
            rng.standard_normal((VOCABULARY, 16)).astype(np.float32), "embedding"
        ),
        numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "head"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "sequence_axis"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "feature_axis"),
    ]
    nodes = [
        helper.make_node("Gather", ["embedding", "input_ids"], ["embedded"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "feature_axis"], ["mask3"]),
        helper.make_node("Mul", ["embedded", "mask3"], ["masked"]),
        helper.make_node("ReduceMean", ["masked", "sequence_axis"], ["pooled"], keepdims=0),
        helper.make_node("MatMul", ["pooled", "head"], ["logits"]),
    ]
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask")
    ]
    output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])
    graph = helper.make_graph(nodes, "tiny_text", inputs, [output], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
