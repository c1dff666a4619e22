"""One module per runtime, behind one small interface.

A backend is a module with these names (see `Backend`):

- ``RUNTIME``: its name, spelled as in docs/method.md §6.
- ``availability()``: whether the runtime is installed, without importing it.
- ``offers(precision, model_kind)``: the methods it can build for a precision,
  or the reason it cannot.
- ``build(variant, ctx)``: export/convert/quantize; runs in a build process.
- ``load(variant, artifact, ctx)``: a `Runner`; runs in the measuring worker.

Heavy imports happen inside ``build`` and ``load`` only. Built-in backends are
the literal list below; third parties register a module through the
``bakeoff.backends`` entry-point group (``mine = mypkg.mine``). The two together are
the one registry of runtimes (`runtime_names`, `get_backend`) that workload
validation, the command line, `bakeoff env` and the advice read. A registered
module is imported only when its backend is asked for, and one that cannot be used
is unavailable with why (`RegisteredBackend`), never a crash.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from bakeoff.judge.outputs import OutputGate, default_gate
from bakeoff.source import ModelSource

ENTRY_POINT_GROUP = "bakeoff.backends"

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
    # The workload's quality gate, for builds that tune against it (NNCF's
    # accuracy-aware INT8); the default is the workload default.
    gate: OutputGate = field(default_factory=default_gate)
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


# What a registered module must define to be a backend (the names of `Backend`).
_FUNCTIONS = ("availability", "offers", "build", "load")


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """Registered backends by runtime name, read from installed metadata (nothing is
    imported; a few ms, so not cached: a path added later is seen). A built-in name
    cannot be taken over; of two distributions with one name, the first on sys.path
    wins, as for an import."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in BUILTIN_BACKENDS:
            found.setdefault(ep.name, ep)
    return found


# The fake runtime (and model kind) is a test double for the engine, statistics and
# verdict logic: users never see it unless this variable is set (the tests set it).
DEVELOPMENT_VARIABLE = "BAKEOFF_DEV"


def development() -> bool:
    return os.environ.get(DEVELOPMENT_VARIABLE, "") not in ("", "0")


def _builtin_names() -> tuple[str, ...]:
    return tuple(n for n in BUILTIN_BACKENDS if n != "fake" or development())


def runtime_names() -> tuple[str, ...]:
    """Every runtime bakeoff knows: the built-ins in their order, then the registered
    ones by name."""
    return (*_builtin_names(), *sorted(_entry_points()))


def is_runtime(name: str) -> bool:
    return name in _builtin_names() or name in _entry_points()


def runtime_origin(name: str) -> str:
    """Where a runtime comes from: "built-in", or the entry point (and distribution)."""
    if name in BUILTIN_BACKENDS:
        return "built-in"
    ep = _entry_points().get(name)
    if ep is None:
        raise KeyError(name)
    return _origin(ep)


def _origin(ep: importlib.metadata.EntryPoint) -> str:
    """The module an entry point names and its distribution: "mypkg.mine from mypkg 0.1"."""
    dist = ep.dist
    return f"{ep.value} from {dist.name} {dist.version}" if dist is not None else ep.value


class RegisteredBackend:
    """A backend registered through the entry-point group, imported when asked for.

    One whose module cannot be imported, lacks a function of the interface, names
    another RUNTIME, or raises while saying whether it is available or what it
    offers is unavailable with that error: `bakeoff env` lists it and a run marks
    its candidates unavailable instead of stopping. Its build and load run in the
    worker processes, where any failure is the candidate's.
    """

    def __init__(self, ep: importlib.metadata.EntryPoint) -> None:
        self.RUNTIME = ep.name
        self.origin = _origin(ep)
        registers = f"{ep.name} = {ep.value}"
        self.install = (
            f"fix or uninstall {ep.dist.name}, whose entry point is {registers}"
            if ep.dist is not None
            else f"fix the entry point {registers}"
        )
        self.module: Any = None
        self.error: str | None = None
        self._where = ep.value
        try:
            module = ep.load()
        except Exception as exc:  # a third party's module may raise anything on import
            self.error = f"{ep.value} cannot be loaded: {type(exc).__name__}: {exc}"
            return
        missing = [n for n in _FUNCTIONS if not callable(getattr(module, n, None))]
        if missing:
            self.error = f"{ep.value} is not a backend: it has no {', '.join(missing)}"
        elif getattr(module, "RUNTIME", None) != ep.name:
            self.error = (
                f"{ep.value} says RUNTIME = {getattr(module, 'RUNTIME', None)!r}, "
                f"not {ep.name!r} as its entry point"
            )
        else:
            self.module = module

    def availability(self) -> Availability:
        if self.error is not None:
            return Availability(False, None, self.error, self.install)
        try:
            return cast(Availability, self.module.availability())
        except Exception as exc:
            why = f"{self._where}.availability() raised {type(exc).__name__}: {exc}"
            return Availability(False, None, why, self.install)

    def offers(self, precision: str, model_kind: str) -> list[Offer]:
        why = self.error
        if why is None:
            try:
                return list(self.module.offers(precision, model_kind))
            except Exception as exc:
                why = f"{self._where}.offers() raised {type(exc).__name__}: {exc}"
        return [Offer(Variant(self.RUNTIME, precision), why)]

    def build(self, variant: Variant, ctx: BuildContext) -> dict[str, Any]:
        return cast(dict[str, Any], self._usable().build(variant, ctx))

    def load(self, variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> Runner:
        return cast(Runner, self._usable().load(variant, artifact, ctx))

    def _usable(self) -> Any:
        if self.error is not None:
            raise RuntimeError(self.error)
        return self.module


def get_backend(runtime: str) -> Backend:
    """The backend of a runtime in `runtime_names`; KeyError for any other name."""
    if runtime in BUILTIN_BACKENDS:
        return cast(Backend, importlib.import_module(BUILTIN_BACKENDS[runtime]))
    ep = _entry_points().get(runtime)
    if ep is None:
        raise KeyError(runtime)
    return RegisteredBackend(ep)


def _declares(runtime: str, name: str) -> bool:
    """Whether the runtime's module sets `name` to True (a built-in module, or the one
    a registered backend loaded; one that failed to load declares nothing)."""
    backend = get_backend(runtime)
    module = backend if runtime in BUILTIN_BACKENDS else getattr(backend, "module", None)
    return bool(getattr(module, name, False))


def any_batch_size(runtime: str) -> bool:
    """Whether a loaded runner of `runtime` runs any batch size, compiling per shape
    on the fly if at all, so that one worker process can be timed at each batch size
    in turn (a module says so with ``ANY_BATCH_SIZE = True``). A runtime that fixes
    the batch shape when it loads (JAX, TVM, LiteRT, TensorRT), or that would change
    what it runs after a second shape (tf.function's relaxed retracing), says
    nothing and gets a fresh worker per batch size."""
    return _declares(runtime, "ANY_BATCH_SIZE")


def compiles_when_loaded(runtime: str) -> bool:
    """Whether `runtime` compiles while it loads or in its first calls (a module says
    so with ``COMPILES_WHEN_LOADED = True``): such loads take the longest, so when
    loads run side by side they start first and the others fill in beside them."""
    return _declares(runtime, "COMPILES_WHEN_LOADED")


@dataclass(frozen=True)
class Reference:
    """A model kind's reference: its own framework at FP32, which every other variant's
    quality is checked against and whose speed is the baseline (docs/method.md §1
    step 3). `what` is how the advice names it; `advised` is False for the fake
    kind, which exists for bakeoff's own tests and gets no advice."""

    runtime: str
    what: str
    advised: bool = True


REFERENCES: dict[str, Reference] = {
    "hf": Reference("torch", "Hugging Face transformers + PyTorch"),
    "torch": Reference("torch", "PyTorch eager"),
    "onnx": Reference("onnxruntime", "ONNX Runtime"),
    "openvino": Reference("openvino", "OpenVINO"),  # an OpenVINO IR runs on OpenVINO only
    "keras": Reference("keras-tensorflow", "Keras 3 on its TensorFlow backend"),
    "jax": Reference("jax", "JAX"),
    "savedmodel": Reference("tensorflow", "TensorFlow"),
    # "fp32" of a .tflite file is the file as it is: there is no other model to
    # convert from. A file quantized already is its own reference (`file_reference_note`).
    "tflite": Reference("litert", "LiteRT, running the TFLite file as it is"),
    "fake": Reference("fake", "the fake runtime", advised=False),
}


# Where a model kind's own reference runtime is not installed, the FP32 of a runtime
# that reads the same file itself stands in: OpenVINO converts a SavedModel with no
# TensorFlow, and runs FP32 at its f32 precision hint (never bf16 behind the name).
STAND_IN_REFERENCES: dict[str, Reference] = {
    "savedmodel": Reference("openvino", "OpenVINO at FP32 (its own SavedModel reader)"),
    "tflite": Reference("openvino", "OpenVINO at FP32 (its own TFLite reader)"),
    # ONNX Runtime refusing or crashing on a file (an operator it lacks, a graph an
    # older exporter wrote) leaves OpenVINO, which reads ONNX itself.
    "onnx": Reference("openvino", "OpenVINO at FP32 (its own ONNX reader)"),
}


def reference_variant(model_kind: str) -> Variant:
    """The FP32 reference variant of a model kind (PyTorch eager for any other kind)."""
    return reference_choice(model_kind)[0]


def reference_choice(model_kind: str) -> tuple[Variant, str]:
    """The FP32 reference variant of a model kind, and why it is not the kind's own
    reference ("" when it is): a stand-in where the own one is not installed."""
    own = REFERENCES.get(model_kind, REFERENCES["torch"])
    stand_in = STAND_IN_REFERENCES.get(model_kind)
    if stand_in is not None:
        missing = get_backend(own.runtime).availability()
        if not missing.available and get_backend(stand_in.runtime).availability().available:
            install = f" ({missing.install})" if missing.install else ""
            why = (
                f"the reference is {stand_in.what}, {stand_in.runtime}-fp32: {own.what} "
                f"is not installed here{install}"
            )
            return Variant(stand_in.runtime, "fp32"), why
    return Variant(own.runtime, "fp32"), ""


# How a run note names the runtime that holds the reference.
_RUNTIME_LABELS = {"litert": "LiteRT", "openvino": "OpenVINO"}


def file_reference_note(model_kind: str, path: str | None) -> str:
    """What a reader must know about the reference of this very file ("" when
    nothing): a .tflite whose weights are quantized already is its own reference,
    under its runtime's "fp32" name, and the other candidates are gated against it
    rather than against an FP32 model, which does not exist."""
    if model_kind != "tflite" or path is None:
        return ""
    from bakeoff.backends.tflite_file import quantized_note

    variant = reference_variant(model_kind)
    label = _RUNTIME_LABELS.get(variant.runtime, variant.runtime)
    return quantized_note(path, label, variant.id)
