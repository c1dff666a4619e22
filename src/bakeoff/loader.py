"""From a workload reference to a loaded `Workload`: `builtin:NAME`, or a TOML file
that describes the user's model or names a built-in one.

The one module that knows both the file format (`workload`) and the built-in
workloads (`builtins`), which are themselves written in that format: with it
here, neither of those imports the other's user.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bakeoff.builtins import load_builtin
from bakeoff.errors import UserError
from bakeoff.workload import Workload, WorkloadSpec, parse_spec, workload_from_spec


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
    spec = parse_spec(path.read_text(encoding="utf-8"), str(path))
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
