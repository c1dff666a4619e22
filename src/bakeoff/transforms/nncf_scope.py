"""What NNCF's INT8 leaves in float: a model's recurrent operators. Quantizing an
LSTM's inputs and recurrent weights compounds the rounding over every time step (a
real speaker encoder, Resemblyzer's 3-layer LSTM, keeps a cosine of 0.50 with them
quantized and 0.9998 without), and NNCF's accuracy control fails inside itself on
such graphs (KeyError on a node id); left in float through NNCF's ignored scope, the
matrix products around them are still INT8. The usual remedy, recorded with the
variant's settings."""

from __future__ import annotations

from typing import Any

# OpenVINO operation types that carry a recurrence (the converters' LSTM / GRU / RNN).
RECURRENT_TYPES = (
    "LSTMSequence",
    "GRUSequence",
    "RNNSequence",
    "LSTMCell",
    "GRUCell",
    "RNNCell",
    "TensorIterator",
    "Loop",
)


def recurrent_types(model: Any) -> list[str]:
    """The recurrent operation types in an OpenVINO model, sorted."""
    return sorted({op.get_type_name() for op in model.get_ops()} & set(RECURRENT_TYPES))


def float_scope(nncf: Any, model: Any) -> dict[str, Any]:
    """nncf.quantize's `ignored_scope` keeping `model`'s recurrent operators in float
    (nothing where it has none)."""
    types = recurrent_types(model)
    return {"ignored_scope": nncf.IgnoredScope(types=types, validate=False)} if types else {}
