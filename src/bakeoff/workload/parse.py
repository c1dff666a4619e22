"""Reading a spec: TOML text to a `WorkloadSpec`, every mistake a `UserError`.

pydantic's errors are rewritten for people: the file, the key, what was expected,
and for an unknown key the keys that fit where it was written (those of the
model's own kind, of the data's own source) with the closest one as a hint.
"""

from __future__ import annotations

import difflib
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from bakeoff.errors import UserError, did_you_mean
from bakeoff.user_files import read_text
from bakeoff.workload.data_spec import DataSpec
from bakeoff.workload.spec import ModelSpec, WorkloadSpec


def _format_validation_error(
    origin: str, err: ValidationError, spec_cls: type, raw: Any = None
) -> str:
    lines = [f"{origin}: invalid workload"]
    for e in err.errors():
        loc = list(e["loc"])
        key = ".".join(str(p) for p in loc) if loc else "(top level)"
        if e["type"] == "extra_forbidden":
            known = _known_keys(spec_cls, loc[:-1], raw)
            hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
            more = f"; did you mean {hint[0]!r}?" if hint else ""
            lines.append(f"  {key}: unknown key{more} (expected one of: {', '.join(known)})")
        elif e["type"] == "missing":
            lines.append(f"  {key}: required key is missing")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            if e["type"] == "literal_error":  # a kind, a task, a metric: one of some names
                names = re.findall(r"'([^']*)'", str(e.get("ctx", {}).get("expected", "")))
                msg += did_you_mean(str(e.get("input")), names)
            lines.append(f"  {key}: {msg} (got {e.get('input')!r})")
    return "\n".join(lines)


# [model] keys by kind: a misspelled key is answered with the keys its own kind takes,
# not with every key of every kind.
MODEL_KEYS_BY_KIND: dict[str, tuple[str, ...]] = {
    "torch": ("kind", "factory", "weights", "weights_key"),
    "hf": ("kind", "path", "task", "num_labels"),
    "onnx": ("kind", "path"),
    "openvino": ("kind", "path"),
    "keras": ("kind", "path", "factory"),
    "jax": ("kind", "function", "params"),
    "savedmodel": ("kind", "path"),
    "tflite": ("kind", "path"),
    "builtin": ("kind", "name"),
    "fake": ("kind", "options"),
}
# [data] keys that go with some sources only (the rest go with every source).
_DATA_KEYS_FOR_SOURCE = {
    "max_length": ("text", "dataset"),
    "columns": ("dataset",),
    "labels": ("dataset",),
}
_DATA_SOURCES = ("factory", "path", "text", "dataset")


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The spec class behind a field: `DataSpec | None` and `list[CandidateSpec]` too."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _section_model(arg)
        if found is not None:
            return found
    return None


def _known_keys(spec_cls: type, path: list[Any], raw: Any = None) -> list[str]:
    """The keys allowed where an unknown key was found, in the order the spec lists them.

    `path` is pydantic's location of the key's table (list indices included, as for
    `[[candidates]]`); `raw` is the parsed TOML, which says the model's kind and the
    data's source, so the list is the one that applies to this file.
    """
    cls: Any = spec_cls
    section: Any = raw
    for part in path:
        if isinstance(part, int):  # one entry of an array of tables
            section = section[part] if isinstance(section, list) and part < len(section) else None
            continue
        found = (
            _section_model(cls.model_fields[part].annotation) if part in cls.model_fields else None
        )
        if found is None:
            return []
        cls = found
        section = section.get(part) if isinstance(section, dict) else None
    keys = list(cls.model_fields)
    if cls is ModelSpec and isinstance(section, dict):
        keys = list(MODEL_KEYS_BY_KIND.get(str(section.get("kind")), keys))
    elif cls is DataSpec and isinstance(section, dict):
        given = [s for s in _DATA_SOURCES if s in section]
        if len(given) == 1:
            keys = [
                k
                for k in keys
                if (k not in _DATA_SOURCES or k == given[0])
                and given[0] in _DATA_KEYS_FOR_SOURCE.get(k, given)
            ]
    return keys


# A model file given where a workload goes (`bakeoff run model.onnx`): the [model]
# lines of the workload that would name it.
_MODEL_FILES = {
    ".onnx": 'kind = "onnx", path = "{name}"',
    ".xml": 'kind = "openvino", path = "{name}"',
    ".keras": 'kind = "keras", path = "{name}"',
    ".h5": 'kind = "keras", path = "{name}"',
    ".hdf5": 'kind = "keras", path = "{name}"',
    ".tflite": 'kind = "tflite", path = "{name}"',
    ".pt": 'kind = "torch", factory = "module:function", weights = "{name}"',
    ".pth": 'kind = "torch", factory = "module:function", weights = "{name}"',
    ".safetensors": 'kind = "torch", factory = "module:function", weights = "{name}"',
}


def what_a_workload_is(path: Path) -> str:
    """What to give instead of `path`, said after what is wrong with it."""
    model = _MODEL_FILES.get(path.suffix.lower())
    if model is not None:
        return (
            f"{path.name} looks like a model file: give a workload .toml that names it "
            f"([model] {model.format(name=path.name)}) and its [data]"
        )
    if path.suffix.lower() == ".toml":
        return "save it as UTF-8 text (a workload is a TOML file naming the model and its data)"
    return "give a workload: a .toml file (UTF-8 text) naming the model and its data"


def parse_spec_file(path: Path, origin: str | None = None) -> WorkloadSpec:
    """The workload TOML at `path` (named `origin` in messages), read and parsed: a
    file that is not text, or not TOML, is refused with what a workload is."""
    origin = origin or str(path)
    fix = what_a_workload_is(path)
    text = read_text(path, origin, fix)
    # A .toml that does not parse is a workload with a typo: TOML's own message says it.
    return parse_spec(text, origin, None if path.suffix.lower() == ".toml" else fix)


def parse_spec(text: str, origin: str, fix: str | None = None) -> WorkloadSpec:
    more = f"; {fix}" if fix else ""
    try:
        raw = tomllib.loads(text)
    # ValueError besides TOMLDecodeError: an integer past Python's digit limit
    except ValueError as exc:
        raise UserError(f"{origin}: not valid TOML: {exc}{more}") from None
    except RecursionError:  # arrays or tables nested deeper than the parser's stack
        raise UserError(f"{origin}: not valid TOML: nested too deep{more}") from None
    try:
        return WorkloadSpec.model_validate(raw)
    except ValidationError as exc:
        raise UserError(_format_validation_error(origin, exc, WorkloadSpec, raw)) from None
