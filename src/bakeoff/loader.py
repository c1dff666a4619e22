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
from bakeoff.model_file import is_model_path, spec_for_model, spec_toml
from bakeoff.workload import (
    GenerationWorkload,
    Workload,
    WorkloadSpec,
    generation_workload_from_spec,
    is_generation,
    parse_spec,
    parse_spec_file,
    workload_from_spec,
)


def workload_ref(ref: str | None) -> str:
    """What a resumed run loads again: builtins by name, files by absolute path."""
    ref = ref or "builtin:minilm"
    return ref if ref.startswith("builtin:") else str(Path(ref).resolve())


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
    if is_model_path(ref):
        if not (Path(ref) / "config.json").is_file():
            return None  # no Hugging Face folder: load_workload takes it (or refuses it)
        spec = parse_spec(spec_toml(spec_for_model(ref), ref), ref)
        if not is_generation(spec):
            return None
        return generation_workload_from_spec(spec, ref, str(Path(ref).resolve().parent))
    path = Path(ref)
    if not path.is_file():
        return None
    spec = parse_spec_file(path)
    if not is_generation(spec):
        return None
    return generation_workload_from_spec(spec, str(path), str(path.resolve().parent))


def load_workload(ref: str | None, data: str | None = None) -> Workload:
    """Load `builtin:NAME`, a workload TOML path or a model file or folder given alone
    (with the data file `data`, or data made for it), with its data."""
    ref = ref or "builtin:minilm"
    if data is not None and not is_model_path(ref):
        raise UserError(
            f"--data {data}: goes with a model file or folder given alone; {ref} names its "
            "own data ([data] in the workload)"
        )
    if ref.startswith("builtin:"):
        return load_builtin(ref.removeprefix("builtin:"))
    if is_model_path(ref):
        spec = parse_spec(spec_toml(spec_for_model(ref, data), ref), ref)
        if is_generation(spec):
            raise UserError(
                f"{ref}: a text-generation model: `bakeoff run {ref}` measures it; this "
                "command does not take generative models yet"
            )
        return workload_from_spec(spec, origin=ref, base_dir=str(Path(ref).resolve().parent))
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
