"""From a workload reference to a loaded `Workload`: `builtin:NAME`, or a TOML file
that describes the user's model or names a built-in one.

The one module that knows both the file format (`workload`) and the built-in
workloads (`builtins`), which are themselves written in that format: with it
here, neither of those imports the other's user.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bakeoff.builtins import GENERATIVE_BUILTINS, load_builtin, load_generation_builtin
from bakeoff.errors import UserError
from bakeoff.workload import (
    GenerationWorkload,
    Workload,
    WorkloadSpec,
    generation_workload_from_spec,
    is_generation,
    parse_spec_file,
    workload_from_spec,
)


def load_generation(
    ref: str | None, say: Callable[[str], None] = lambda _: None
) -> GenerationWorkload | None:
    """The text-generation workload `ref` names (a built-in or a TOML file whose model
    has task = "text-generation"), or None when it names another kind of workload
    (which `load_workload` loads, and whose mistakes it reports)."""
    ref = ref or "builtin:minilm"
    if ref.startswith("builtin:"):
        name = ref.removeprefix("builtin:")
        return load_generation_builtin(name, say) if name in GENERATIVE_BUILTINS else None
    path = Path(ref)
    if not path.is_file():
        return None
    spec = parse_spec_file(path)
    if not is_generation(spec):
        return None
    return generation_workload_from_spec(spec, str(path), str(path.resolve().parent))


def load_workload(ref: str | None) -> Workload:
    """Load `builtin:NAME` or a workload TOML path, with its data."""
    ref = ref or "builtin:minilm"
    if ref.startswith("builtin:"):
        return load_builtin(ref.removeprefix("builtin:"))
    path = Path(ref)
    if not path.is_file():
        raise UserError(
            f"{ref}: no such workload file (give a .toml path or builtin:minilm / builtin:digits)"
        )
    spec = parse_spec_file(path)
    if is_generation(spec):
        raise UserError(
            f"{path}: a text-generation workload: `bakeoff run {path}` measures it; this "
            "command does not take generative models yet"
        )
    if spec.data is None and spec.train is not None:
        raise UserError(
            f"{path}: a training recipe ([train], no [data] to run inference on): "
            f"run it with `bakeoff train {path}`"
        )
    if spec.model.kind == "builtin":
        return _from_builtin(spec, str(path))
    base_dir = str(path.resolve().parent)
    return workload_from_spec(spec, origin=str(path), base_dir=base_dir)


def _from_builtin(spec: WorkloadSpec, origin: str) -> Workload:
    """A TOML that names a built-in model: the user's [quality] and [search] win."""
    assert spec.model.name is not None
    base = load_builtin(spec.model.name)
    if spec.data is not None:
        raise UserError(f"{origin}: [data] cannot be given with model.kind = 'builtin'")
    updates: dict[str, Any] = {"name": spec.name, "description": spec.description}
    for key in ("quality", "search", "candidates"):
        if key in spec.model_fields_set:
            updates[key] = getattr(spec, key)
    merged = base.spec.model_copy(update=updates)
    return Workload(merged, origin, base.source, base.inputs, base.labels, base.notes)
