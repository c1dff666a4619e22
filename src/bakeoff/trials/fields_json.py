"""Dataclass fields to and from JSON, each value type-checked: the generic part of the
worker messages in `jobs`. A few dozen lines rather than pydantic, since every worker
process imports them before it loads anything (see `jobs`)."""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

__all__ = ["JobError", "decode", "describe", "encode", "from_fields"]


class JobError(ValueError):
    """A message that is not a job or command this worker knows; says what is wrong."""


# JSON's own leaves; a list of only these (a round's samples) is copied at C speed.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def encode(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list | tuple):
        if all(type(v) in _LEAVES for v in value):
            return list(value)
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def from_fields(cls: type[Any], data: Any, path: str, skip: tuple[str, ...] = ()) -> Any:
    if not isinstance(data, dict):
        raise JobError(f"field {path!r} must be an object, not {describe(data)}")
    hints = _hints(cls)
    names = [f.name for f in fields(cls)]
    unknown = [k for k in data if k not in names and k not in skip]
    if unknown:
        raise JobError(f"unknown field {_join(path, str(unknown[0]))!r}")
    values = {}
    for f in fields(cls):
        where = _join(path, f.name)
        if f.name in data:
            values[f.name] = decode(hints[f.name], data[f.name], where)
        elif f.default is MISSING and f.default_factory is MISSING:
            raise JobError(f"missing field {where!r}")
    return cls(**values)


# A field's type -> the exact types its JSON value may have (so true is no integer)
# and what to call it in an error.
_SCALARS: dict[Any, tuple[frozenset[type], str]] = {
    str: (frozenset({str}), "a string"),
    int: (frozenset({int}), "an integer"),
    float: (frozenset({int, float}), "a number"),
    bool: (frozenset({bool}), "true or false"),
}


def decode(tp: Any, value: Any, path: str) -> Any:
    if tp is Any:
        return value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        (inner,) = (a for a in args if a is not type(None))  # X | None only
        return decode(inner, value, path)
    if tp in _SCALARS:
        allowed, name = _SCALARS[tp]
        if type(value) in allowed:
            return float(value) if tp is float else value
        raise JobError(f"field {path!r} must be {name}, not {describe(value)}")
    if origin in (list, tuple):
        (item,) = args if origin is list else args[:1]  # tuple[X, ...] only
        if not isinstance(value, list | tuple):
            raise JobError(f"field {path!r} must be a list, not {describe(value)}")
        if item in _SCALARS and all(type(v) in _SCALARS[item][0] for v in value):  # samples
            items = [float(v) for v in value] if item is float else list(value)
        else:
            items = [decode(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise JobError(f"field {path!r} must be an object, not {describe(value)}")
        return {k: decode(args[1], v, _join(path, k)) for k, v in value.items()}
    if isinstance(tp, type) and is_dataclass(tp):
        return from_fields(tp, value, path)
    raise TypeError(f"{path}: no JSON form for {tp!r}")  # a field type this module lacks
