"""The request/response codec of the KServe / Open Inference Protocol (OIP) v2 REST
``infer`` endpoint, with Triton's binary tensor data extension.

A request body is UTF-8 JSON, or, when the client sends ``Inference-Header-Content-Length``,
that many bytes of JSON followed by the raw data of the inputs that declare
``parameters.binary_data_size``, concatenated in the order of the JSON ``inputs`` list.
Responses use the same layout: JSON first, then the binary outputs' bytes. Fixed-size
tensors travel as little-endian row-major bytes; BYTES elements as a 4-byte little-endian
length followed by the element's bytes.

Pure functions over bytes and numpy, so the web layer only moves bytes and headers and
every client mistake surfaces here as a ProtocolError (a 400 with its message).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

# Far above any real model's input, low enough that a forged shape cannot make us
# allocate gigabytes before the element count check fails.
MAX_ELEMENTS = 1 << 28
# numpy 1.x's limit; numpy 2 allows 64, but no model needs more and this keeps us portable.
_MAX_DIMS = 32


class ProtocolError(ValueError):
    """What a client sent is malformed or inconsistent; the message (one sentence, says
    what was expected) becomes a 400 {"error": message}."""


DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}

# The JSON element types each datatype accepts (exact types: bool is not an int here).
_JSON_TYPES: dict[str, tuple[frozenset[type], str]] = {
    "BOOL": (frozenset({bool}), "JSON booleans"),
    "BYTES": (frozenset({str}), "JSON strings"),
    **{k: (frozenset({int}), "JSON integers") for k in DATATYPES if "INT" in k},
    **{k: (frozenset({int, float}), "JSON numbers") for k in ("FP16", "FP32", "FP64")},
}
_JSON_NAMES = {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}


def datatype_of(dtype: np.dtype[Any]) -> str:
    """The OIP datatype name of a numpy dtype; ValueError (a server-side fault) if none fits."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return "BYTES"
    # Match on kind and size so that non-native byte orders map too.
    for name, candidate in DATATYPES.items():
        if candidate.kind == dtype.kind and candidate.itemsize == dtype.itemsize:
            return name
    raise ValueError(f"numpy dtype {dtype} has no Open Inference Protocol datatype")


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    binary: bool | None  # parameters.binary_data if given, else None


@dataclass
class InferRequest:
    id: str | None
    inputs: dict[str, npt.NDArray[Any]]  # decoded, in request order; BYTES: object of bytes
    datatypes: dict[str, str]  # input name -> datatype as the client declared it
    outputs: list[RequestedOutput] | None  # None: no particular outputs asked for (all)
    binary_output: bool  # request-level parameters.binary_data_output
    parameters: dict[str, Any]  # request-level parameters as sent


def _object(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object")
    return value


def _shape(name: str, shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ProtocolError(f"input {name!r}: 'shape' must be a list of non-negative integers")
    # Each dimension is bounded too: [huge, 0] has no elements yet overflows numpy's intp.
    if (
        len(shape) > _MAX_DIMS
        or max(shape, default=0) > MAX_ELEMENTS
        or math.prod(shape) > MAX_ELEMENTS
    ):
        raise ProtocolError(
            f"input {name!r}: shape {shape} is too large; expected at most {_MAX_DIMS} "
            f"dimensions and {MAX_ELEMENTS} elements"
        )
    return tuple(shape)


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    flat = data
    # One pass per nesting level: the per-item Python loop runs over rows, while the
    # membership test that decides whether another level exists runs in C.
    while list in map(type, flat):
        deeper: list[Any] = []
        for item in flat:
            if type(item) is list:
                deeper.extend(item)
            else:
                deeper.append(item)
        flat = deeper
    return flat


def _decode_json(name: str, datatype: str, shape: tuple[int, ...], data: Any) -> npt.NDArray[Any]:
    if not isinstance(data, list) and shape:
        raise ProtocolError(f"input {name!r}: 'data' must be a list for shape {list(shape)}")
    flat = _flatten(data)
    count = math.prod(shape)
    if len(flat) != count:
        raise ProtocolError(
            f"input {name!r}: expected {count} elements for shape {list(shape)}, got {len(flat)}"
        )
    allowed, expected = _JSON_TYPES[datatype]
    bad = set(map(type, flat)) - allowed
    if bad:
        got = _JSON_NAMES.get(next(iter(bad)), "an object or null")
        raise ProtocolError(f"input {name!r} ({datatype}): expected {expected}, got {got}")
    dtype = DATATYPES[datatype]
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        try:
            array[:] = [s.encode("utf-8") for s in flat]
        except UnicodeEncodeError as e:
            raise ProtocolError(f"input {name!r}: expected valid Unicode strings") from e
        return array.reshape(shape)
    if dtype.kind in "iu" and flat:
        info = np.iinfo(dtype)
        low, high = min(flat), max(flat)
        if low < info.min or high > info.max:
            bad_value = low if low < info.min else high
            raise ProtocolError(
                f"input {name!r} ({datatype}): value {bad_value} is out of range; "
                f"expected {info.min} to {info.max}"
            )
    try:
        # Out-of-range floats become inf, as IEEE rounding would make them anyway.
        with np.errstate(over="ignore"):
            return np.array(flat, dtype=dtype).reshape(shape)
    except OverflowError as e:
        raise ProtocolError(f"input {name!r} ({datatype}): expected numbers in range") from e


def _decode_binary(
    name: str, datatype: str, shape: tuple[int, ...], chunk: memoryview
) -> npt.NDArray[Any]:
    count = math.prod(shape)
    dtype = DATATYPES[datatype]
    if datatype == "BYTES":
        items: list[bytes] = []
        pos, end = 0, len(chunk)
        while pos < end:
            if end - pos < 4:
                raise ProtocolError(f"input {name!r}: binary BYTES data ends inside a length")
            (length,) = struct.unpack_from("<I", chunk, pos)
            pos += 4
            if length > end - pos:
                raise ProtocolError(
                    f"input {name!r}: binary BYTES element of {length} bytes overruns its data"
                )
            items.append(bytes(chunk[pos : pos + length]))
            pos += length
        if len(items) != count:
            raise ProtocolError(
                f"input {name!r}: expected {count} BYTES elements for shape {list(shape)}, "
                f"got {len(items)}"
            )
        array = np.empty(count, dtype=object)
        array[:] = items
        return array.reshape(shape)
    if len(chunk) != count * dtype.itemsize:
        raise ProtocolError(
            f"input {name!r}: expected {count * dtype.itemsize} bytes of binary data for "
            f"{datatype} shape {list(shape)}, got {len(chunk)}"
        )
    if datatype == "BOOL":
        raw = np.frombuffer(chunk, dtype=np.uint8)
        if raw.size and raw.max() > 1:
            raise ProtocolError(f"input {name!r}: binary BOOL bytes must be 0 or 1")
        return raw.astype(np.bool_).reshape(shape)
    # astype copies: the result is writable, native-endian and does not pin the body.
    return np.frombuffer(chunk, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)


def _parse_outputs(value: Any) -> list[RequestedOutput] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(o, dict) for o in value):
        raise ProtocolError("'outputs' must be a list of objects")
    outputs: list[RequestedOutput] = []
    for entry in value:
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ProtocolError("each of 'outputs' must have a 'name' that is a non-empty string")
        params = _object(entry.get("parameters"), f"output {name!r}: 'parameters'")
        binary = params.get("binary_data")
        if binary is not None and not isinstance(binary, bool):
            raise ProtocolError(f"output {name!r}: parameters.binary_data must be a boolean")
        if any(o.name == name for o in outputs):
            raise ProtocolError(f"output {name!r} is requested twice; expected unique names")
        outputs.append(RequestedOutput(name, binary))
    # An empty list asks for nothing in particular, as Triton reads it: all outputs.
    return outputs or None


def parse_infer_request(body: bytes, header_length: int | None) -> InferRequest:
    """Decode an infer request body; header_length is Inference-Header-Content-Length."""
    header, tail = _split_body(body, header_length)
    doc = _json_header(header)
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError("'id' must be a string")
    parameters = _object(doc.get("parameters"), "request 'parameters'")
    binary_output = parameters.get("binary_data_output", False)
    if not isinstance(binary_output, bool):
        raise ProtocolError("parameters.binary_data_output must be a boolean")
    inputs, datatypes = _parse_inputs(doc.get("inputs"), tail, header_length is not None)
    return InferRequest(
        id=request_id,
        inputs=inputs,
        datatypes=datatypes,
        outputs=_parse_outputs(doc.get("outputs")),
        binary_output=binary_output,
        parameters=parameters,
    )


def _split_body(body: bytes, header_length: int | None) -> tuple[memoryview, memoryview]:
    """(JSON header, binary tail): the tail is empty without Inference-Header-Content-Length."""
    view = memoryview(body)
    if header_length is None:
        return view, view[len(view) :]
    if 0 <= header_length <= len(view):
        return view[:header_length], view[header_length:]
    raise ProtocolError(
        f"Inference-Header-Content-Length {header_length} must be between 0 and the "
        f"body's {len(view)} bytes"
    )


def _json_header(header: memoryview) -> dict[str, Any]:
    try:
        doc = json.loads(bytes(header).decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"the request header must be UTF-8 JSON ({e})") from e
    if not isinstance(doc, dict):
        raise ProtocolError("the request must be a JSON object")
    return doc


def _parse_inputs(
    raw_inputs: Any, tail: memoryview, has_header_length: bool
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, str]]:
    """The decoded inputs by name, and the datatype each declared; the binary ones
    take their bytes from `tail` in the order they are listed, which must use it all."""
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError("'inputs' must be a non-empty list of objects")
    inputs: dict[str, npt.NDArray[Any]] = {}
    datatypes: dict[str, str] = {}
    offset = 0
    for entry in raw_inputs:
        name, datatype, shape, params = _input_entry(entry, inputs)
        if "data" in entry:
            inputs[name] = _decode_json(name, datatype, shape, entry["data"])
        else:
            size = _binary_data_size(name, params, has_header_length, len(tail) - offset)
            inputs[name] = _decode_binary(name, datatype, shape, tail[offset : offset + size])
            offset += size
        datatypes[name] = datatype
    if offset != len(tail):
        raise ProtocolError(
            f"the body has {len(tail) - offset} bytes after the binary inputs' data; expected none"
        )
    return inputs, datatypes


def _input_entry(
    entry: Any, seen: dict[str, npt.NDArray[Any]]
) -> tuple[str, str, tuple[int, ...], dict[str, Any]]:
    """One of 'inputs', checked: (name, datatype, shape, parameters), with exactly one
    of 'data' and parameters.binary_data_size; `seen` holds the inputs before it."""
    if not isinstance(entry, dict):
        raise ProtocolError("'inputs' must be a non-empty list of objects")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ProtocolError("each of 'inputs' must have a 'name' that is a non-empty string")
    if name in seen:
        raise ProtocolError(f"input {name!r} appears twice; expected unique names")
    datatype = entry.get("datatype")
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise ProtocolError(
            f"input {name!r}: datatype {datatype!r} is not supported; expected one of "
            + ", ".join(DATATYPES)
        )
    shape = _shape(name, entry.get("shape"))
    params = _object(entry.get("parameters"), f"input {name!r}: 'parameters'")
    if ("data" in entry) == ("binary_data_size" in params):
        raise ProtocolError(
            f"input {name!r}: expected exactly one of 'data' and parameters.binary_data_size"
        )
    return name, datatype, shape, params


def _binary_data_size(
    name: str, params: dict[str, Any], has_header_length: bool, remaining: int
) -> int:
    """The bytes a binary input takes from the tail, which has `remaining` left."""
    size = params["binary_data_size"]
    if type(size) is not int or size < 0:
        raise ProtocolError(
            f"input {name!r}: parameters.binary_data_size must be a non-negative integer"
        )
    if not has_header_length:
        raise ProtocolError(
            f"input {name!r} has binary data, so the request needs an "
            "Inference-Header-Content-Length header"
        )
    if size > remaining:
        raise ProtocolError(
            f"input {name!r}: expected {size} bytes of binary data, but only "
            f"{remaining} remain in the body"
        )
    return size


def binary_choice(request: InferRequest, output_names: list[str]) -> dict[str, bool]:
    """Which outputs to send as binary data, in the order they will be returned."""
    if request.outputs is None:
        return dict.fromkeys(output_names, request.binary_output)
    known = set(output_names)
    for requested in request.outputs:
        if requested.name not in known:
            raise ProtocolError(
                f"unknown output {requested.name!r}; expected one of " + ", ".join(output_names)
            )
    return {
        o.name: request.binary_output if o.binary is None else o.binary for o in request.outputs
    }


def _element_bytes(name: str, item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    raise ValueError(f"output {name!r}: BYTES elements must be bytes or str, not {type(item)}")


def _json_data(name: str, datatype: str, array: npt.NDArray[Any]) -> list[Any]:
    flat = array.ravel()
    if datatype == "BYTES":
        items = [_element_bytes(name, x) for x in flat.tolist()]
        return [b.decode("utf-8", errors="replace") for b in items]
    if flat.dtype.kind == "f" and not np.isfinite(flat).all():
        # JSON has no NaN or infinity; null is what strict parsers accept, so non-finite
        # floats go out as null rather than as Python's non-standard NaN tokens.
        boxed = flat.astype(object)
        boxed[~np.isfinite(flat)] = None
        return list(boxed.tolist())
    return list(flat.tolist())


def _binary_data(name: str, datatype: str, array: npt.NDArray[Any]) -> bytes:
    if datatype == "BYTES":
        parts: list[bytes] = []
        for item in array.ravel().tolist():
            raw = _element_bytes(name, item)
            parts += (struct.pack("<I", len(raw)), raw)
        return b"".join(parts)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def encode_infer_response(
    model_name: str,
    model_version: str,
    request_id: str | None,
    outputs: list[tuple[str, npt.NDArray[Any]]],
    binary: dict[str, bool],
) -> tuple[bytes, int | None]:
    """(body, JSON header length): the length is None when no output is binary; otherwise
    the server sends it as the Inference-Header-Content-Length response header."""
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name, value in outputs:
        array = np.asarray(value)
        datatype = datatype_of(array.dtype)
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary.get(name, False):
            blob = _binary_data(name, datatype, array)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = _json_data(name, datatype, array)
        entries.append(entry)
    doc: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request_id is not None:
        doc["id"] = request_id
    doc["outputs"] = entries
    header = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if not any(binary.get(name, False) for name, _ in outputs):
        return header, None
    return b"".join([header, *blobs]), len(header)
