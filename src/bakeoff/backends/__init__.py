"""One module per runtime, behind one small interface.

A backend is a module with these names (see `Backend`):

- ``RUNTIME``: its name, spelled as in DESIGN.md §6.
- ``availability()``: whether the runtime is installed, without importing it.
- ``offers(precision, model_kind)``: the methods it can build for a precision,
  or the reason it cannot.
- ``build(variant, ctx)``: export/convert/quantize; runs in a build process.
- ``load(variant, artifact, ctx)``: a `Runner`; runs in the measuring worker.

Heavy imports happen inside ``build`` and ``load`` only. Built-in backends are
the literal list below; third parties register a module through the
``bakeoff.backends`` entry-point group.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from bakeoff.workload import ModelSource

BUILTIN_BACKENDS: dict[str, str] = {
    "torch": "bakeoff.backends.torch_eager",
    "torch-compile": "bakeoff.backends.torch_compile",
    "onnxruntime": "bakeoff.backends.onnxruntime",
    "openvino": "bakeoff.backends.openvino",
    "fake": "bakeoff.backends.fake",
    "jax": "bakeoff.backends.jax_backend",
    "tensorflow": "bakeoff.backends.tensorflow_backend",
    "tvm": "bakeoff.backends.tvm",
    "torch-cuda": "bakeoff.backends.torch_cuda",
    "torch-compile-cuda": "bakeoff.backends.torch_compile_cuda",
    "onnxruntime-cuda": "bakeoff.backends.onnxruntime_cuda",
    "onnxruntime-tensorrt": "bakeoff.backends.onnxruntime_tensorrt",
    "tensorrt": "bakeoff.backends.tensorrt_engine",
    "openvino-gpu": "bakeoff.backends.openvino_gpu",
    "jax-cuda": "bakeoff.backends.jax_cuda",
    "keras-jax": "bakeoff.backends.keras_jax",
    "keras-tensorflow": "bakeoff.backends.keras_tensorflow",
    "keras-torch": "bakeoff.backends.keras_torch",
    "litert": "bakeoff.backends.litert",
}


@dataclass(frozen=True)
class Availability:
    available: bool
    version: str | None
    reason: str = ""
    install: str = ""


@dataclass(frozen=True)
class Variant:
    """One way to run the model: runtime x precision x method (batch size comes later)."""

    runtime: str
    precision: str
    method: str | None = None

    @property
    def id(self) -> str:
        parts = [self.runtime, self.precision] + ([self.method] if self.method else [])
        return "-".join(parts)


@dataclass(frozen=True)
class Offer:
    """A variant a backend can build, or the reason it cannot (then `reason` is set).

    `note` is what a reader of its figures must know although it runs: a precision
    this CPU emulates, say (`bakeoff.hardware.emulation_note`). It never stops a
    variant from being built; only `reason` does, for what the runtime refuses.
    """

    variant: Variant
    reason: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class BuildContext:
    source: ModelSource
    artifacts_dir: str  # shared by every build of a run; steps cache their outputs here
    data_path: str  # npz with calib/<name> arrays (calibration) and input names
    input_names: tuple[str, ...]
    threads: int
    # The quality gate's settings, for builds that tune against it (NNCF's
    # accuracy-aware INT8); defaults are the workload defaults.
    metric: str = "cosine"
    max_drop: float = 0.01
    # False for a hand-written candidate: built as asked even where another variant
    # makes it unnecessary (a grid leaves such a variant out: StepNotNeeded).
    skip_unneeded: bool = True


@dataclass(frozen=True)
class LoadContext:
    source: ModelSource
    threads: int
    batch_size: int
    input_names: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)
    candidate_id: str = ""
    # Concurrent inference streams the offline scenario will run (threads is per
    # stream); a runtime that schedules streams itself (OpenVINO) is told here.
    streams: int = 1
    # The run's data file (npz with pool/<name> arrays): a runtime that compiles for
    # the exact batch shape in `load` (JAX, TVM, XLA) reads the per-sample shapes here.
    data_path: str = ""


class Runner(Protocol):
    """A loaded variant. `run` is the only thing timed."""

    settings: dict[str, Any]  # what the runtime actually applied, read back where possible

    def prepare(self, batch: dict[str, Any]) -> Any:
        """Convert a batch of numpy arrays to the runtime's own input, outside the clock."""

    def run(self, prepared: Any) -> Any:
        """One inference call; must return only when the result is complete."""

    def to_numpy(self, output: Any) -> Any:
        """The first output as a float numpy array, for the quality gate."""


# A runner whose `run` may not be called from two threads at once (an OpenVINO
# infer request) also has ``new_stream() -> Callable[[Any], Any]``: a run
# function of its own for one more concurrent stream. Without it, `run` is
# called from every stream (ONNX Runtime sessions and torch modules allow it).


class Backend(Protocol):
    RUNTIME: str

    def availability(self) -> Availability: ...

    def offers(self, precision: str, model_kind: str) -> list[Offer]: ...

    def build(self, variant: Variant, ctx: BuildContext) -> dict[str, Any]: ...

    def load(self, variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> Runner: ...


def get_backend(runtime: str) -> Backend:
    if runtime in BUILTIN_BACKENDS:
        return cast(Backend, importlib.import_module(BUILTIN_BACKENDS[runtime]))
    for ep in importlib.metadata.entry_points(group="bakeoff.backends"):
        if ep.name == runtime:
            return cast(Backend, ep.load())
    raise KeyError(runtime)


def package_availability(dist: str, module: str, install: str) -> Availability:
    """Installed or not, judged from metadata: importing a runtime takes seconds."""
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version is None or importlib.util.find_spec(module) is None:
        return Availability(False, None, f"{dist} is not installed", install)
    return Availability(True, version)
