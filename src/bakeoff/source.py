"""What a worker process needs to rebuild a model (`ModelSource`), and importing
the user's factories next to their workload file.

It sits below everything that builds or loads a model (models, keras_models,
transforms, backends, the worker, the cache), which need these and nothing
else of the workload format.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakeoff.errors import UserError

# torch weights files that need torch.load (weights_only=True, never a full unpickle)
PICKLE_SUFFIXES = (".pt", ".pth", ".bin")


@dataclass(frozen=True)
class ModelSource:
    """Everything a worker process needs to rebuild the model: plain values only, so
    it goes to a worker as JSON."""

    kind: str
    factory: str | None
    path: str | None
    base_dir: str | None
    options: dict[str, Any] = field(default_factory=dict)
    task: str | None = None  # hf: feature-extraction | sequence-classification
    num_labels: int | None = None  # hf sequence-classification without a trained head
    weights: str | None = None  # torch: a state_dict file; jax: the params file (absolute)
    # input name -> axes (besides batch) that vary: exported dynamic, checked at two sizes
    variable_axes: dict[str, list[int]] = field(default_factory=dict)
    function: str | None = None  # jax: "module:fn"; its params file is `weights`
    # input name -> its batch axis where that is not 0 (exported dynamic like the batch)
    batch_axes: dict[str, int] = field(default_factory=dict)
    # inputs with no batch axis, fed unchanged to every call (exported static)
    constants: list[str] = field(default_factory=list)
    # torch: the state_dict's key in a checkpoint dict `weights` holds ("a.b" nests)
    weights_key: str | None = None


@contextmanager
def on_path(base_dir: str | None) -> Iterator[None]:
    """User factories are looked up next to the workload file."""
    if base_dir is None:
        yield
        return
    sys.path.insert(0, base_dir)
    try:
        yield
    finally:
        with suppress(ValueError):
            sys.path.remove(base_dir)


def _forget_foreign_module(module_name: str, base_dir: str | None) -> None:
    """A module of the same name imported from elsewhere (another workload's folder,
    or a standard module the user's file shadows) must not stand in for this one."""
    if base_dir is None:
        return
    top = module_name.split(".")[0]
    local = Path(base_dir, top + ".py").exists() or Path(base_dir, top, "__init__.py").exists()
    loaded = sys.modules.get(top)
    if not local or loaded is None:
        return
    origin = getattr(loaded, "__file__", None) or ""
    if not Path(origin).resolve().is_relative_to(Path(base_dir).resolve()):
        for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            del sys.modules[name]


def import_factory(ref: str, base_dir: str | None, origin: str, key: str) -> Callable[..., Any]:
    """Import "module:callable"; a failure is a UserError naming the key."""
    module_name, _, attr = ref.partition(":")
    _forget_foreign_module(module_name, base_dir)
    with on_path(base_dir):
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # the user's module may raise anything on import
            where = f" (looked next to the workload, in {base_dir})" if base_dir else ""
            raise UserError(
                f"{origin}: {key} = {ref!r}: cannot import module {module_name!r}{where}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UserError(
                f"{origin}: {key} = {ref!r}: module {module_name!r} has no attribute {attr!r}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise UserError(f"{origin}: {key} = {ref!r}: {attr!r} is not callable")
    return obj
