"""The OIP v2 / Triton binary extension codec: request parsing, output choice, responses."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest

from bakeoff.serve.protocol import (
    DATATYPES,
    MAX_ELEMENTS,
    InferRequest,
    ProtocolError,
    RequestedOutput,
    binary_choice,
    datatype_of,
    encode_infer_response,
    parse_infer_request,
)


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def _inp(name: str, datatype: str, shape: list[int], data: Any) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def _bin(name: str, datatype: str, shape: list[int], size: int) -> dict[str, Any]:
    params = {"binary_data_size": size}
    return {"name": name, "datatype": datatype, "shape": shape, "parameters": params}


def _parse(*inputs: dict[str, Any], **extra: Any) -> InferRequest:
    return parse_infer_request(_json({"inputs": list(inputs), **extra}), None)


def _binary_request(doc: dict[str, Any], *blobs: bytes) -> tuple[bytes, int]:
    header = _json(doc)
    return header + b"".join(blobs), len(header)


def _bytes_blob(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(b)) + b for b in items)


def _error(body: bytes, header_length: int | None = None) -> str:
    with pytest.raises(ProtocolError) as info:
        parse_infer_request(body, header_length)
    return str(info.value)


def _input_error(*inputs: dict[str, Any]) -> str:
    return _error(_json({"inputs": list(inputs)}))


def test_json_nested_and_flat_data_decode_to_typed_arrays() -> None:
    req = _parse(
        _inp("x", "FP32", [2, 3], [[1, 2.5, 3], [4, 5, 6]]),
        _inp("ids", "INT64", [2, 2], [1, -2, 3, 1 << 40]),
        _inp("mask", "BOOL", [1, 2, 1], [[[True], [False]]]),
        _inp("text", "BYTES", [2], ["héllo", ""]),
        id="r1",
    )
    assert req.id == "r1"
    assert list(req.inputs) == ["x", "ids", "mask", "text"]
    assert req.datatypes == {"x": "FP32", "ids": "INT64", "mask": "BOOL", "text": "BYTES"}
    x, ids, mask, text = req.inputs.values()
    assert x.dtype == np.float32 and x.shape == (2, 3)
    np.testing.assert_array_equal(x, [[1, 2.5, 3], [4, 5, 6]])
    assert ids.dtype == np.int64 and ids.tolist() == [[1, -2], [3, 1 << 40]]
    assert mask.dtype == np.bool_ and mask.tolist() == [[[True], [False]]]
    assert text.dtype == object and text.tolist() == ["héllo".encode(), b""]
    assert req.outputs is None and req.binary_output is False and req.parameters == {}


def test_mixed_nesting_depths_flatten_row_major() -> None:
    req = _parse(_inp("x", "INT32", [4], [1, [2, [3]], 4]))
    assert req.inputs["x"].tolist() == [1, 2, 3, 4]


def test_scalar_shape_takes_one_element_bare_or_listed() -> None:
    bare = _parse(_inp("s", "FP64", [], 2.5)).inputs["s"]
    listed = _parse(_inp("s", "INT8", [], [7])).inputs["s"]
    assert bare.shape == () and bare.item() == 2.5
    assert listed.shape == () and listed.dtype == np.int8 and listed.item() == 7
    assert "'s'" in _input_error(_inp("s", "FP64", [1], 2.5))


def test_zero_size_input() -> None:
    empty = _parse(_inp("e", "FP32", [0, 3], [])).inputs["e"]
    assert empty.shape == (0, 3) and empty.dtype == np.float32


def test_element_count_mismatch_names_input_and_counts() -> None:
    message = _input_error(_inp("x", "FP32", [2, 3], [1, 2, 3, 4, 5]))
    assert "'x'" in message and "6" in message and "5" in message


@pytest.mark.parametrize(
    ("datatype", "value"),
    [("INT64", 1.5), ("INT64", 2.0), ("INT64", True), ("FP32", True), ("FP32", "1.0")],
)
def test_wrong_element_type(datatype: str, value: Any) -> None:
    message = _input_error(_inp("bad_in", datatype, [2], [1, value]))
    assert "'bad_in'" in message and datatype in message


def test_bool_and_bytes_reject_other_json_types() -> None:
    assert "'m'" in _input_error(_inp("m", "BOOL", [2], [1, 0]))
    assert "'t'" in _input_error(_inp("t", "BYTES", [1], [3]))


def test_int_out_of_range() -> None:
    message = _input_error(_inp("small", "INT8", [2], [1, 128]))
    assert "'small'" in message and "128" in message
    assert "'u'" in _input_error(_inp("u", "UINT8", [1], [-1]))
    big = _parse(_inp("b", "UINT64", [1], [(1 << 64) - 1])).inputs["b"]
    assert big.dtype == np.uint64 and int(big[0]) == (1 << 64) - 1


@pytest.mark.parametrize("datatype", ["BF16", "FLOAT", "fp32", 3])
def test_unknown_datatype_lists_supported(datatype: Any) -> None:
    message = _input_error(_inp("x", datatype, [1], [1]))
    assert "'x'" in message and "FP32" in message and "BYTES" in message


def test_duplicate_input_names() -> None:
    message = _input_error(_inp("x", "FP32", [1], [1]), _inp("x", "FP32", [1], [2]))
    assert "'x'" in message and "twice" in message


def test_missing_data_and_both_data_and_binary_size() -> None:
    missing = {"name": "nodata", "datatype": "FP32", "shape": [1]}
    assert "'nodata'" in _input_error(missing)
    both = {**_bin("both", "FP32", [1], 4), "data": [1.0]}
    body, length = _binary_request({"inputs": [both]}, np.float32(1).tobytes())
    assert "'both'" in _error(body, length)


@pytest.mark.parametrize(
    "shape", [[-1], [2.0], [True], "2", None, [MAX_ELEMENTS, 2], [1] * 40, [1 << 62, 0]]
)
def test_bad_or_huge_shapes(shape: Any) -> None:
    assert "'x'" in _input_error(_inp("x", "FP32", shape, []))


def test_binary_inputs_mixed_with_json_in_order() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([-1, 1 << 40, 3], dtype=np.int64)
    m = np.array([True, False, True, True])
    words = [b"ab", b"", "é".encode()]
    doc = {
        "inputs": [
            _bin("a", "FP32", [2, 3], a.nbytes),
            _inp("j", "INT32", [2], [5, 6]),
            _bin("b", "INT64", [3], b.nbytes),
            _bin("m", "BOOL", [2, 2], 4),
            _bin("w", "BYTES", [3], len(_bytes_blob(words))),
        ]
    }
    blobs = (a.tobytes(), b.astype("<i8").tobytes(), m.tobytes(), _bytes_blob(words))
    req = parse_infer_request(*_binary_request(doc, *blobs))
    assert list(req.inputs) == ["a", "j", "b", "m", "w"]
    np.testing.assert_array_equal(req.inputs["a"], a)
    assert req.inputs["a"].flags.writeable
    assert req.inputs["j"].tolist() == [5, 6]
    assert req.inputs["b"].dtype == np.int64 and req.inputs["b"].tolist() == b.tolist()
    assert req.inputs["m"].dtype == np.bool_ and req.inputs["m"].tolist() == [[1, 0], [1, 1]]
    assert req.inputs["w"].dtype == object and req.inputs["w"].tolist() == words


def test_binary_size_mismatch_names_both_sizes() -> None:
    body, length = _binary_request({"inputs": [_bin("v", "FP32", [3], 8)]}, b"\0" * 8)
    message = _error(body, length)
    assert "'v'" in message and "12" in message and "8" in message


def test_binary_too_few_and_leftover_bytes() -> None:
    body, length = _binary_request({"inputs": [_bin("v", "FP32", [2], 8)]}, b"\0" * 4)
    assert "'v'" in _error(body, length)
    body, length = _binary_request({"inputs": [_bin("v", "FP32", [1], 4)]}, b"\0" * 6)
    assert "2 bytes after" in _error(body, length)


def test_binary_bytes_elements_must_match_shape_and_consume_exactly() -> None:
    blob = _bytes_blob([b"a", b"b"])
    body, length = _binary_request({"inputs": [_bin("w", "BYTES", [3], len(blob))]}, blob)
    assert "'w'" in _error(body, length)
    overrun = struct.pack("<I", 10) + b"abc"
    body, length = _binary_request({"inputs": [_bin("w", "BYTES", [1], len(overrun))]}, overrun)
    assert "'w'" in _error(body, length)


def test_binary_bool_bytes_must_be_zero_or_one() -> None:
    body, length = _binary_request({"inputs": [_bin("m", "BOOL", [2], 2)]}, b"\x01\x02")
    assert "'m'" in _error(body, length)


def test_binary_input_needs_header_length() -> None:
    body = _json({"inputs": [_bin("v", "FP32", [1], 4)]})
    assert "Inference-Header-Content-Length" in _error(body, None)


def test_header_length_out_of_bounds() -> None:
    body = _json({"inputs": [_inp("x", "FP32", [1], [1])]})
    assert "Inference-Header-Content-Length" in _error(body, len(body) + 1)
    assert "Inference-Header-Content-Length" in _error(body, -1)


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe{}", b"[" * 100_000])
def test_malformed_json(body: bytes) -> None:
    assert "JSON" in _error(body)


@pytest.mark.parametrize("body", [b"[]", b"3", b'"inputs"'])
def test_non_object_json(body: bytes) -> None:
    assert "object" in _error(body)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"inputs": []}, "'inputs'"),
        ({"inputs": [3]}, "'inputs'"),
        ({"id": 7}, "'id'"),
        ({"parameters": []}, "parameters"),
        ({"parameters": {"binary_data_output": 1}}, "binary_data_output"),
        ({"outputs": {"name": "y"}}, "'outputs'"),
        ({"outputs": [{"name": 3}]}, "'outputs'"),
        ({"outputs": [{"name": "y", "parameters": {"binary_data": "yes"}}]}, "'y'"),
        ({"outputs": [{"name": "y"}, {"name": "y"}]}, "'y'"),
    ],
)
def test_malformed_fields(extra: dict[str, Any], needle: str) -> None:
    doc = {"inputs": [_inp("x", "FP32", [1], [1])], **extra}
    assert needle in _error(_json(doc))


def test_outputs_and_request_parameters_parse() -> None:
    req = _parse(
        _inp("x", "FP32", [1], [1]),
        outputs=[
            {"name": "a", "parameters": {"binary_data": True}},
            {"name": "b"},
            {"name": "c", "parameters": {"binary_data": False}},
        ],
        parameters={"binary_data_output": True, "priority": 2},
    )
    assert req.outputs == [
        RequestedOutput("a", True),
        RequestedOutput("b", None),
        RequestedOutput("c", False),
    ]
    assert req.binary_output is True
    assert req.parameters == {"binary_data_output": True, "priority": 2}
    # An empty list asks for nothing in particular: all outputs, like an absent one.
    assert _parse(_inp("x", "FP32", [1], [1]), outputs=[]).outputs is None


def _request(outputs: list[RequestedOutput] | None, binary_output: bool) -> InferRequest:
    return InferRequest(None, {}, {}, outputs, binary_output, {})


def test_binary_choice_per_output_overrides_request_level() -> None:
    requested = [
        RequestedOutput("c", None),
        RequestedOutput("a", True),
        RequestedOutput("b", False),
    ]
    on = binary_choice(_request(requested, True), ["a", "b", "c"])
    assert list(on.items()) == [("c", True), ("a", True), ("b", False)]
    off = binary_choice(_request(requested, False), ["a", "b", "c"])
    assert off == {"c": False, "a": True, "b": False}


def test_binary_choice_all_outputs_when_none_requested() -> None:
    assert list(binary_choice(_request(None, True), ["y", "x"]).items()) == [
        ("y", True),
        ("x", True),
    ]
    assert binary_choice(_request(None, False), ["y"]) == {"y": False}


def test_binary_choice_unknown_output_lists_known() -> None:
    with pytest.raises(ProtocolError) as info:
        binary_choice(_request([RequestedOutput("nope", None)], False), ["logits", "probs"])
    message = str(info.value)
    assert "'nope'" in message and "logits" in message and "probs" in message


def test_datatype_of() -> None:
    for name, dtype in DATATYPES.items():
        assert datatype_of(dtype) == name
    assert datatype_of(np.dtype("U3")) == datatype_of(np.dtype("S2")) == "BYTES"
    assert datatype_of(np.dtype(">f4")) == "FP32"
    with pytest.raises(ValueError):
        datatype_of(np.dtype(np.complex64))


def test_encode_json_only_response() -> None:
    outputs: list[tuple[str, np.ndarray[Any, Any]]] = [
        ("logits", np.array([[1.5, -2.0], [0.25, 3.0]], dtype=np.float32)),
        ("half", np.array([0.5, np.nan, np.inf], dtype=np.float16)),
        ("label", np.array(["cat", b"d\xffg"], dtype=object)),
        ("count", np.array(3, dtype=np.int64)),
    ]
    body, header_length = encode_infer_response("m", "1", "req-9", outputs, {"logits": False})
    assert header_length is None
    assert b": " not in body and b", " not in body  # compact separators
    doc = json.loads(body)
    assert list(doc) == ["model_name", "model_version", "id", "outputs"]
    assert doc["model_name"] == "m" and doc["model_version"] == "1" and doc["id"] == "req-9"
    logits, half, label, count = doc["outputs"]
    assert logits == {
        "name": "logits",
        "datatype": "FP32",
        "shape": [2, 2],
        "data": [1.5, -2.0, 0.25, 3.0],
    }
    assert half["datatype"] == "FP16" and half["data"] == [0.5, None, None]
    assert label["datatype"] == "BYTES" and label["data"] == ["cat", "d\ufffdg"]
    assert count == {"name": "count", "datatype": "INT64", "shape": [], "data": [3]}


def test_encode_response_with_binary_and_json_outputs() -> None:
    probs = np.array([[0.1, 0.9], [0.7, 0.3]], dtype=np.float32)
    ids = np.array([4, 5], dtype=np.int64)
    words = np.array([b"yes", "né", b""], dtype=object)
    outputs: list[tuple[str, np.ndarray[Any, Any]]] = [
        ("probs", probs),
        ("ids", ids),
        ("words", words),
    ]
    binary = {"probs": True, "ids": False, "words": True}
    body, header_length = encode_infer_response("m", "2", None, outputs, binary)
    assert header_length is not None
    doc = json.loads(body[:header_length])
    assert "id" not in doc
    p, i, w = doc["outputs"]
    assert p == {
        "name": "probs",
        "datatype": "FP32",
        "shape": [2, 2],
        "parameters": {"binary_data_size": 16},
    }
    assert i["data"] == [4, 5] and "parameters" not in i
    tail = body[header_length:]
    assert len(tail) == 16 + w["parameters"]["binary_data_size"]
    decoded = np.frombuffer(tail[:16], dtype="<f4").reshape(p["shape"])
    np.testing.assert_array_equal(decoded, probs)
    assert tail[16:] == _bytes_blob([b"yes", "né".encode(), b""])


def test_binary_response_round_trips_through_request_parser() -> None:
    words = np.array([["a", "bc"], ["", "déf"]], dtype=object)
    flags = np.array([True, False])
    outputs: list[tuple[str, np.ndarray[Any, Any]]] = [("w", words), ("f", flags)]
    body, header_length = encode_infer_response("m", "1", None, outputs, {"w": True, "f": True})
    assert header_length is not None
    doc = json.loads(body[:header_length])
    # A response's outputs are shaped like binary request inputs: reparse them as such.
    request = {"inputs": doc["outputs"]}
    req = parse_infer_request(*_binary_request(request, body[header_length:]))
    assert req.inputs["w"].tolist() == [[b"a", b"bc"], [b"", "déf".encode()]]
    assert req.inputs["f"].tolist() == [True, False]


def test_large_flat_json_input() -> None:
    data = list(range(32 * 128))
    req = _parse(_inp("ids", "INT64", [32, 128], data))
    assert req.inputs["ids"].shape == (32, 128) and int(req.inputs["ids"][31, 127]) == 4095
