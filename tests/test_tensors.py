"""A model's return value as named outputs, the same names in every format."""

from __future__ import annotations

from collections import OrderedDict

from bakeoff.tensors import named_outputs, sequence_output_name


class _ModelOutput(OrderedDict):
    """What transformers returns: a mapping whose None fields are absent."""


def test_one_tensor_is_the_output() -> None:
    assert named_outputs(1.0) == [("output", 1.0)]


def test_a_sequence_names_by_position_the_first_as_the_onnx_export_does() -> None:
    assert named_outputs((1, 2, 3)) == [("output", 1), ("output_1", 2), ("output_2", 3)]
    assert sequence_output_name(0) == "output"


def test_a_mapping_names_by_key_nested_ones_joined_and_none_left_out() -> None:
    out = _ModelOutput(logits=1, hidden=(2, 3), attentions=None)
    assert named_outputs(out) == [("logits", 1), ("hidden_0", 2), ("hidden_1", 3)]
    assert named_outputs({"a": {"b": 4}}) == [("a.b", 4)]
