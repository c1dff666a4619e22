"""Hypothesis strategies that damage valid inputs the way files and requests get
damaged: bytes flipped, inserted, deleted or cut off; keys dropped, added or given a
value of another type, anywhere in a nested document. A fuzz test starts from inputs
it knows are valid and feeds bakeoff what these make of them.
"""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

from hypothesis import strategies as st

# Values of every type a document's key may be given instead of its own: numbers at
# and past the edges, empty and odd text, containers where scalars go and back.
_ODD = [
    *(0, -1, 1, 2**31, 2**63, 10**30, 0.0, -0.5, 1e308, True, False),
    *("", " ", "0", "-1", "builtin:", "x" * 300, "../..", "/", "é\u0000"),
    *([], {}, [1, "a"], {"k": 1}, [[1]]),
]
ODD_VALUES = st.one_of(
    st.sampled_from(_ODD),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-3, 70), max_size=4),
)


@st.composite
def damaged_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` with one to four byte-level changes."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete", "repeat"]))
        at = draw(st.sampled_from(range(len(out) + 1)))  # uniform: integers() favours 0
        if op == "flip" and out:
            at = min(at, len(out) - 1)
            out[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del out[at:]
        elif op == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del out[at : at + draw(st.integers(1, 16))]
        elif op == "repeat":
            out[at:at] = out[at : at + draw(st.integers(1, 16))]
    return bytes(out)


def _slots(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) in a nested document of dicts and lists."""
    found: list[tuple[Any, Any]] = []
    stack = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            found.append((node, key))
            if isinstance(value, (dict, list)):
                stack.append(value)
    return found


@st.composite
def damaged_document(draw: st.DrawFn, doc: Any) -> Any:
    """A copy of `doc` with one to three keys dropped, retyped or added."""
    out = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(out)
        if not slots:
            break
        node, key = draw(st.sampled_from(slots))
        op = draw(st.sampled_from(["drop", "retype", "retype", "add"]))
        if op == "drop":
            del node[key]
        elif op == "retype":
            node[key] = draw(ODD_VALUES)
        elif isinstance(node, dict):
            node[draw(st.sampled_from(["extra", "name", "kind", "shape", "x", ""]))] = draw(
                ODD_VALUES
            )
    return out


def toml_value(value: Any) -> str:
    """A value in TOML's inline syntax (a document here is written all inline)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's string escapes are TOML's
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        pairs = (f"{_key(k)} = {toml_value(v)}" for k, v in value.items() if v is not None)
        return "{ " + ", ".join(pairs) + " }"
    raise TypeError(type(value))


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _is_tables(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def to_toml(doc: dict[str, Any]) -> str:
    """`doc` as a person writes it: top-level keys, then a [table] per section and an
    [[array]] entry per table in a list; deeper tables inline."""
    lines = [
        f"{_key(k)} = {toml_value(v)}"
        for k, v in doc.items()
        if v is not None and not isinstance(v, dict) and not _is_tables(v)
    ]
    for k, v in doc.items():
        for table, header in (
            [(v, f"[{_key(k)}]")] if isinstance(v, dict) else
            [(t, f"[[{_key(k)}]]") for t in v] if _is_tables(v) else []
        ):  # fmt: skip
            lines += ["", header]
            lines += [
                f"{_key(k2)} = {toml_value(v2)}" for k2, v2 in table.items() if v2 is not None
            ]
    return "\n".join(lines) + "\n"
