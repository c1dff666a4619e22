"""Workload specs: a TOML file validated with pydantic.

A spec says what model, what data, how quality is judged and what to search.
`workload_from_spec` turns a spec into a `Workload`: the spec plus the data
arrays, ready for the orchestrator (`bakeoff.loader.load_workload` reads a
reference, built-in or file). Every mistake in a spec becomes a `UserError`
that names the file, the key and what was expected.
"""

from __future__ import annotations

import difflib
import tomllib
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bakeoff.backends import is_runtime, runtime_names
from bakeoff.batching import Layout
from bakeoff.errors import UserError
from bakeoff.source import PICKLE_SUFFIXES, ModelSource, import_factory, on_path

# Runtime names are checked against the one registry, `bakeoff.backends.runtime_names`
# (the built-ins and what the `bakeoff.backends` entry points register).
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "int4")
DEFAULT_RUNTIMES = ["torch", "torch-compile", "onnxruntime", "openvino"]
# Model kinds whose default candidates differ from DEFAULT_RUNTIMES (used when
# neither --runtimes nor [search] runtimes is given).
# A Keras model natively on each Keras backend, then exported (LiteRT, ONNX).
KERAS_DEFAULT_RUNTIMES = [
    "keras-jax",
    "keras-tensorflow",
    "keras-torch",
    "tensorflow",
    "litert",
    "onnxruntime",
    "openvino",
]
DEFAULT_RUNTIMES_BY_KIND: dict[str, list[str]] = {
    "fake": ["fake"],
    "keras": KERAS_DEFAULT_RUNTIMES,
    "jax": ["jax"],
    "savedmodel": ["tensorflow"],
}


def default_runtimes(model_kind: str) -> list[str]:
    return list(DEFAULT_RUNTIMES_BY_KIND.get(model_kind, DEFAULT_RUNTIMES))


Precision = Literal["fp32", "fp16", "bf16", "int8", "int4"]
DEFAULT_PRECISIONS: tuple[Precision, ...] = ("fp32", "int8")
Metric = Literal["accuracy", "agreement", "cosine", "max_abs"]
Objective = Literal["auto", "latency", "throughput"]
HfTask = Literal["feature-extraction", "sequence-classification"]
DEFAULT_HF_TASK: HfTask = "feature-extraction"
# Checkpoint formats model.weights accepts. safetensors holds tensors only; the
# pickle-based ones are read with torch.load(weights_only=True) and nothing else.
SAFETENSORS_SUFFIXES = (".safetensors",)
DEFAULT_MAX_LENGTH = 128
# kind = "jax" parameter files: numpy arrays (read with allow_pickle=False) or Flax msgpack.
JAX_PARAMS_SUFFIXES = (".npz", ".msgpack")


# MXNet is refused by name (model.kind) and by its checkpoint files (model.path).
MXNET_SUFFIXES = ("-symbol.json", ".params")
MXNET_RETIRED = (
    "MXNet is retired: Apache MXNet moved to the Apache Attic in 2023 and gets no more "
    "releases or fixes, so bakeoff does not run it. Migrate through ONNX: export the model "
    "with MXNet's own exporter, e.g. mx.onnx.export_model(sym, params, in_shapes=[...], "
    "onnx_file_path='model.onnx'), then run bakeoff on the file with "
    '[model] kind = "onnx", path = "model.onnx"'
)


def _check_runtime(name: str) -> None:
    if not is_runtime(name):
        known = runtime_names()
        hint = difflib.get_close_matches(name, known, n=1)
        more = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ValueError(f"unknown runtime {name!r}{more}; expected one of {', '.join(known)}")


# Keras model files other than Keras 3's own .keras zip, and why each is refused.
KERAS_LEGACY_SUFFIXES = (".h5", ".hdf5")


def _check_keras_source(path: str | None, factory: str | None) -> None:
    if (path is None) == (factory is None):
        raise ValueError(
            'kind = "keras" needs exactly one of path = "model.keras" (saved with '
            'model.save) or factory = "module:callable" returning a keras.Model'
        )
    if path is None or path.endswith(".keras"):
        return
    if path.endswith(KERAS_LEGACY_SUFFIXES):
        raise ValueError(
            f"path = {path!r} is a legacy HDF5 Keras file; Keras 3 loads .keras files only. "
            "Load it once with tf.keras / keras 2 and save it again with "
            "model.save('model.keras'), or give a factory that builds the model"
        )
    raise ValueError(
        f'kind = "keras" needs path = "model.keras" (a Keras 3 file), got {path!r}; '
        'for a TensorFlow SavedModel folder use kind = "savedmodel"'
    )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    kind: Literal[
        "torch", "hf", "onnx", "openvino", "keras", "jax", "savedmodel", "builtin", "fake"
    ]
    name: str | None = Field(None, description="builtin: the built-in workload's name")
    factory: str | None = Field(None, description='"module:callable" returning a torch.nn.Module')
    weights: str | None = Field(
        None, description="torch: a state_dict file (.safetensors, .pt, .pth, .bin) to load"
    )
    path: str | None = Field(
        None, description="a model file (onnx, OpenVINO IR .xml) or a local folder (hf)"
    )
    task: HfTask | None = Field(None, description="hf: what the module returns")
    num_labels: int | None = Field(
        None, ge=2, description="hf sequence-classification: classes of an untrained head"
    )
    options: dict[str, Any] = Field(default_factory=dict, description="settings for kind=fake")
    function: str | None = Field(
        None, description='jax: "module:fn", a pure function called as fn(params, *inputs)'
    )
    params: str | None = Field(
        None, description="jax: the function's parameters, a .npz ('/' in keys nests) or .msgpack"
    )

    @field_validator("kind", mode="before")
    @classmethod
    def _not_mxnet_kind(cls, kind: Any) -> Any:
        if isinstance(kind, str) and kind.lower() == "mxnet":
            raise ValueError(MXNET_RETIRED)
        return kind

    @field_validator("path", mode="before")
    @classmethod
    def _not_mxnet_files(cls, path: Any, info: ValidationInfo) -> Any:
        # An MXNet checkpoint is a NAME-symbol.json graph plus NAME-0000.params weights.
        # Without a valid kind (kind = "mxnet" already said all this) it is not repeated.
        if "kind" in info.data and isinstance(path, str) and path.endswith(MXNET_SUFFIXES):
            raise ValueError(f"this looks like an MXNet checkpoint. {MXNET_RETIRED}")
        return path

    @model_validator(mode="after")
    def _needs_source(self) -> ModelSpec:
        if self.kind == "torch" and not self.factory:
            raise ValueError('kind = "torch" needs factory = "module:callable"')
        if self.kind in ("onnx", "hf", "openvino") and not self.path:
            raise ValueError(f'kind = "{self.kind}" needs path = "..."')
        if self.kind == "openvino" and self.path and not self.path.endswith(".xml"):
            raise ValueError(
                f'kind = "openvino" needs path = "model.xml" (an OpenVINO IR), got {self.path!r}'
            )
        if self.kind == "jax":
            if not self.function or not self.params:
                raise ValueError(
                    'kind = "jax" needs function = "module:fn" (called as fn(params, *inputs)) '
                    'and params = "params.npz" (or a Flax .msgpack)'
                )
            if ":" not in self.function:
                raise ValueError(f'function must look like "module:fn", got {self.function!r}')
            if not self.params.endswith(JAX_PARAMS_SUFFIXES):
                raise ValueError(
                    f"params = {self.params!r}: expected one of {', '.join(JAX_PARAMS_SUFFIXES)} "
                    "(arrays only, never a pickle)"
                )
        elif self.function is not None or self.params is not None:
            raise ValueError(f'function and params are for kind = "jax" only, not "{self.kind}"')
        if self.kind == "savedmodel" and not self.path:
            raise ValueError('kind = "savedmodel" needs path = "a SavedModel folder"')
        if self.kind == "keras":
            _check_keras_source(self.path, self.factory)
        if self.kind == "builtin" and not self.name:
            raise ValueError('kind = "builtin" needs name = "minilm", "digits" or "digits-keras"')
        if self.factory is not None and ":" not in self.factory:
            raise ValueError(f'factory must look like "module:callable", got {self.factory!r}')
        if self.weights is not None:
            if self.kind != "torch":
                raise ValueError(f'weights is for kind = "torch" only, not kind = "{self.kind}"')
            known = SAFETENSORS_SUFFIXES + PICKLE_SUFFIXES
            if not self.weights.endswith(known):
                raise ValueError(
                    f"weights = {self.weights!r}: unknown file type; expected one of "
                    f"{', '.join(known)} (a state_dict; .safetensors preferred)"
                )
        if self.task is not None and self.kind != "hf":
            raise ValueError(f'task is for kind = "hf" only, not kind = "{self.kind}"')
        if self.num_labels is not None and self.task != "sequence-classification":
            raise ValueError('num_labels needs kind = "hf" and task = "sequence-classification"')
        return self


class DataSpec(_Strict):
    factory: str | None = None
    path: str | None = None
    text: str | None = Field(
        None, description="hf: a UTF-8 file, one text per line, tokenized by the model's folder"
    )
    max_length: PositiveInt | None = Field(
        None,
        description=f"text: tokens per text, padded or truncated (default {DEFAULT_MAX_LENGTH})",
    )
    quality_samples: PositiveInt | None = Field(
        None, description="how many held-out samples the quality gate uses"
    )
    variable_axes: dict[str, list[NonNegativeInt]] = Field(
        default_factory=dict,
        description="input name -> axes besides the batch axis whose size may vary, "
        "e.g. { input_ids = [1], attention_mask = [1] } for the sequence length",
    )
    batch_axes: dict[str, NonNegativeInt] = Field(
        default_factory=dict,
        description="input name -> the axis its samples are on, where that is not 0, "
        "e.g. { state = 1 } for a recurrent state [layers, batch, hidden]",
    )
    constants: list[str] = Field(
        default_factory=list,
        description="inputs with no batch axis, fed unchanged to every call (a sample "
        "rate, say); a 0-d array is one by default",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DataSpec:
        if sum(x is not None for x in (self.factory, self.path, self.text)) != 1:
            raise ValueError(
                'give exactly one of factory = "module:callable", path = "x.npz" '
                'or text = "lines.txt"'
            )
        if self.max_length is not None and self.text is None:
            raise ValueError('max_length goes with text = "lines.txt"')
        if self.factory is not None and ":" not in self.factory:
            raise ValueError(f'factory must look like "module:callable", got {self.factory!r}')
        return self


class QualitySpec(_Strict):
    metric: Metric = "cosine"
    max_drop: float = Field(0.01, ge=0.0)


class SearchSpec(_Strict):
    runtimes: list[str] = Field(default_factory=lambda: list(DEFAULT_RUNTIMES))
    precisions: list[Precision] = Field(default_factory=lambda: list(DEFAULT_PRECISIONS))
    batch_sizes: list[PositiveInt] = Field(default_factory=lambda: [1, 32])
    objective: Objective = "auto"
    threads: PositiveInt | None = None
    margin: float = Field(
        default=0.02, ge=0.0, lt=0.5, description="equivalence margin: closer than this is a tie"
    )
    ci_target: float = Field(
        default=0.02, gt=0.0, lt=0.5, description="stop sampling when CIs are this tight (relative)"
    )

    @model_validator(mode="after")
    def _known_runtimes(self) -> SearchSpec:
        for name in self.runtimes:
            _check_runtime(name)
        if not self.runtimes or not self.precisions or not self.batch_sizes:
            raise ValueError("runtimes, precisions and batch_sizes must not be empty")
        return self


class ConstraintsSpec(_Strict):
    """Limits a winner must meet; a measured candidate beyond one is not eligible."""

    max_p50_ms: float | None = Field(default=None, gt=0)
    max_p99_ms: float | None = Field(default=None, gt=0)
    max_peak_memory_mb: float | None = Field(default=None, gt=0)
    max_model_size_mb: float | None = Field(default=None, gt=0)
    max_cold_start_s: float | None = Field(default=None, gt=0, description="load + first call")


class CandidateSpec(_Strict):
    """A hand-written candidate: one runtime with its settings, under a label."""

    label: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
    runtime: str
    precision: Precision = "fp32"
    method: str | None = Field(None, description="e.g. dynamic | static | nncf")
    options: dict[str, Any] = Field(default_factory=dict, description="runtime settings")
    batch_sizes: list[PositiveInt] | None = None

    @model_validator(mode="after")
    def _known_runtime(self) -> CandidateSpec:
        _check_runtime(self.runtime)
        threads = self.options.get("threads")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"options.threads must be a positive integer, got {threads!r}")
        return self


class WorkloadSpec(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    model: ModelSpec
    data: DataSpec | None = None  # optional only for kind = "builtin" (its own data)
    quality: QualitySpec = Field(
        default_factory=lambda: QualitySpec(metric="cosine", max_drop=0.01)
    )
    search: SearchSpec = SearchSpec()
    constraints: ConstraintsSpec = ConstraintsSpec()
    candidates: list[CandidateSpec] = Field(
        default_factory=list, description="explicit candidates; replace the search grid"
    )

    @model_validator(mode="before")
    @classmethod
    def _task_aware_metric(cls, raw: Any) -> Any:
        """A classifier's natural gate is top-1 agreement with the reference, not cosine.

        Only fills in a metric the user left out, so every other workload keeps the
        cosine default; malformed input is left for the field validators to report.
        """
        if not isinstance(raw, dict):
            return raw
        model = raw.get("model")
        if not (isinstance(model, dict) and model.get("task") == "sequence-classification"):
            return raw
        quality = raw.get("quality", {})
        if isinstance(quality, dict) and "metric" not in quality:
            return {**raw, "quality": {**quality, "metric": "agreement"}}
        return raw

    @model_validator(mode="after")
    def _data_needed(self) -> WorkloadSpec:
        if self.data is None and self.model.kind != "builtin":
            raise ValueError(
                '[data] is required: give factory = "module:callable", path or text (hf only)'
            )
        if self.data is not None and self.data.text is not None and self.model.kind != "hf":
            raise ValueError(
                'data.text needs model.kind = "hf": texts are tokenized with the model '
                "folder's own tokenizer; for other models give data.factory or data.path"
            )
        labels = [c.label for c in self.candidates]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"candidate labels must be unique; repeated: {', '.join(dupes)}")
        return self


@dataclass(frozen=True)
class Workload:
    """A validated spec plus its data. Samples are on each input's batch axis
    (`source.batch_axes`, else axis 0); `source.constants` have none."""

    spec: WorkloadSpec
    origin: str  # the file path or "builtin:NAME"
    source: ModelSource
    inputs: dict[str, np.ndarray]
    labels: np.ndarray | None
    # Things the user must know about this workload (e.g. an untrained head);
    # also issued as warnings when the workload is loaded.
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def n_samples(self) -> int:
        return Layout.of(self.source).count(self.inputs)


# ---------------------------------------------------------------- loading


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
            lines.append(f"  {key}: {msg} (got {e.get('input')!r})")
    return "\n".join(lines)


# [model] keys by kind: a misspelled key is answered with the keys its own kind takes,
# not with every key of every kind.
MODEL_KEYS_BY_KIND: dict[str, tuple[str, ...]] = {
    "torch": ("kind", "factory", "weights"),
    "hf": ("kind", "path", "task", "num_labels"),
    "onnx": ("kind", "path"),
    "openvino": ("kind", "path"),
    "keras": ("kind", "path", "factory"),
    "jax": ("kind", "function", "params"),
    "savedmodel": ("kind", "path"),
    "builtin": ("kind", "name"),
    "fake": ("kind", "options"),
}
# [data] keys that go with one source only (the rest go with every source).
_DATA_KEYS_FOR_SOURCE = {"max_length": "text"}
_DATA_SOURCES = ("factory", "path", "text")


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
                and _DATA_KEYS_FOR_SOURCE.get(k, given[0]) == given[0]
            ]
    return keys


def parse_spec(text: str, origin: str) -> WorkloadSpec:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{origin}: not valid TOML: {exc}") from None
    try:
        return WorkloadSpec.model_validate(raw)
    except ValidationError as exc:
        raise UserError(_format_validation_error(origin, exc, WorkloadSpec, raw)) from None


def _check_variable_axes(
    axes: dict[str, list[int]], inputs: dict[str, np.ndarray], layout: Layout, origin: str
) -> None:
    for name, wanted in axes.items():
        if name not in inputs:
            raise UserError(
                f"{origin}: data.variable_axes: no input named {name!r} "
                f"(inputs: {', '.join(inputs)})"
            )
        batch_axis = layout.axis(name)
        if batch_axis is None:
            raise UserError(
                f"{origin}: data.variable_axes.{name}: {name} is a constant (in data.constants, "
                "or 0-d), fed unchanged to every call; only a batched input has variable axes"
            )
        ndim = inputs[name].ndim
        for axis in wanted:
            if axis == batch_axis:
                raise UserError(
                    f"{origin}: data.variable_axes.{name}: axis {axis} is {name}'s batch axis, "
                    "which is always variable; list only the other axes whose size varies"
                )
            if axis >= ndim:
                raise UserError(
                    f"{origin}: data.variable_axes.{name}: axis {axis} does not exist "
                    f"(the input has {ndim} axes; axis {batch_axis}, the batch, is always "
                    "variable)"
                )
            if inputs[name].shape[axis] < 2:
                raise UserError(
                    f"{origin}: data.variable_axes.{name}: axis {axis} has size "
                    f"{inputs[name].shape[axis]}; a variable axis needs at least 2 to vary"
                )


def _layout(
    inputs: dict[str, np.ndarray],
    batch_axes: dict[str, int],
    constants: list[str],
    origin: str,
) -> Layout:
    """Which axis of each input holds the samples, and which inputs have none."""
    known = f"(inputs: {', '.join(inputs)})"
    for name, axis in batch_axes.items():
        if name not in inputs:
            raise UserError(f"{origin}: data.batch_axes: no input named {name!r} {known}")
        shape = inputs[name].shape
        if axis >= len(shape):
            detail = (
                "it is 0-d, so it has no samples: leave it out and it is a constant"
                if not shape
                else f"{name} has shape {shape}, axes 0 to {len(shape) - 1}"
            )
            raise UserError(
                f"{origin}: data.batch_axes.{name}: axis {axis} does not exist ({detail})"
            )
    for name in constants:
        if name not in inputs:
            raise UserError(f"{origin}: data.constants: no input named {name!r} {known}")
        if name in batch_axes:
            raise UserError(
                f"{origin}: data.constants: {name!r} is in data.batch_axes too; an input is "
                "either batched (on one axis) or a constant (the same for every call)"
            )
    # A 0-d array cannot hold samples: it is the same for every call.
    resolved = [
        n for n, v in inputs.items() if n in constants or (v.ndim == 0 and n not in batch_axes)
    ]
    if len(resolved) == len(inputs):
        raise UserError(
            f"{origin}: [data]: every input is a constant ({', '.join(resolved)}: in "
            "data.constants, or 0-d); at least one input must carry the samples"
        )
    return Layout({n: a for n, a in batch_axes.items() if a != 0}, tuple(resolved))


def _disagreement(
    inputs: dict[str, np.ndarray], labels: np.ndarray | None, layout: Layout, origin: str
) -> str:
    """The sample count of every input, where it was looked for, and the keys that fix it."""
    used = {layout.axis(n) for n in layout.batched(inputs)}
    one_axis = len(used) == 1
    where = f" along axis {used.pop()}" if one_axis else " along each input's batch axis"
    parts, counts = [], {}
    for name, arr in inputs.items():
        axis, shape = layout.axis(name), tuple(arr.shape)
        if axis is None:
            why = "is 0-d (a constant)" if arr.ndim == 0 else "is in data.constants"
            parts.append(f"{name} {shape} {why}")
            continue
        counts[name] = shape[axis]
        on = "" if one_axis else f" on axis {axis}"
        parts.append(f"{name} {shape} has {shape[axis]}{on}")
    if labels is not None:
        parts.append(f"labels {tuple(labels.shape)} has {labels.shape[0] if labels.ndim else 0}")
    # The likely fix, with this data's own names: an input whose shape holds the
    # first input's count on another axis has its batch there.
    first = next(iter(counts.values()))
    example = "batch_axes = { state = 1 } for a state [layers, batch, hidden]"
    for name, n in counts.items():
        shape = inputs[name].shape
        if n != first and first in shape:
            example = f"batch_axes = {{ {name} = {shape.index(first)} }}"
            break
    return (
        f"{origin}: [data] arrays disagree on the number of samples{where}: "
        + ", ".join(parts)
        + f"; if an input's batch is on another axis, set data.batch_axes (e.g. {example}); "
        "if an input is the same for every call, list it in data.constants (a 0-d array is a "
        "constant by default)"
    )


def normalize_data(
    raw: Any,
    origin: str,
    batch_axes: dict[str, int] | None = None,
    constants: list[str] | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray | None, Layout]:
    """Accept ndarray, dict name -> ndarray, or (inputs, labels); check that every
    batched input has the same number of samples on its batch axis (labels on axis 0)."""
    labels = None
    if isinstance(raw, tuple) and len(raw) == 2:
        raw, labels = raw
        labels = np.asarray(labels)
    if isinstance(raw, np.ndarray):
        inputs = {"input": raw}
    elif isinstance(raw, dict) and raw:
        inputs = {str(k): np.asarray(v) for k, v in raw.items()}
    else:
        raise UserError(
            f"{origin}: [data] must give an np.ndarray, a dict name -> np.ndarray, or "
            f"(inputs, labels); got {type(raw).__name__}"
        )
    for k, v in inputs.items():
        if v.dtype.kind not in "biuf":
            raise UserError(f"{origin}: [data] input {k!r} must be numeric, got dtype {v.dtype}")
    layout = _layout(inputs, batch_axes or {}, constants or [], origin)
    sizes = {k: inputs[k].shape[layout.axis(k) or 0] for k in layout.batched(inputs)}
    if labels is not None:
        sizes["labels"] = labels.shape[0] if labels.ndim else 0
    if len(set(sizes.values())) != 1:
        raise UserError(_disagreement(inputs, labels, layout, origin))
    n = next(iter(sizes.values()))
    if n < 4:
        raise UserError(f"{origin}: [data] needs at least 4 samples, got {n}")
    return inputs, labels, layout


def _load_data_file(path: Path, origin: str) -> Any:
    if not path.exists():
        raise UserError(f"{origin}: data.path = {str(path)!r}: no such file")
    try:
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            labels = arrays.pop("labels", None)
            return (arrays, labels) if labels is not None else arrays
    except ValueError as exc:  # allow_pickle=False refuses object arrays: never unpickle
        hint = ""
        if "allow_pickle" in str(exc):
            hint = (
                " (an array of Python objects would have to be unpickled, which can run "
                "code; bakeoff never does: save numeric arrays, e.g. np.asarray(x, "
                "dtype=np.float32), or tokenize text first)"
            )
        raise UserError(f"{origin}: data.path = {str(path)!r}: {exc}{hint}") from None
    raise UserError(f"{origin}: data.path = {str(path)!r}: expected a .npz or .npy file")


def _resolve(base_dir: str | None, name: str) -> Path:
    """A path from the spec, relative to the workload file, made absolute: build
    steps change the working directory, so workers must never see a relative one."""
    return Path(base_dir or ".", name).absolute()


def _check_model_path(model: ModelSpec, base_dir: str | None, origin: str) -> str | None:
    if model.path is None:
        return None
    resolved = _resolve(base_dir, model.path)
    key = f"{origin}: model.path = {model.path!r}"
    if not resolved.exists():
        raise UserError(f"{key}: {resolved} does not exist")
    if model.kind == "hf":
        if not resolved.is_dir():
            raise UserError(
                f'{key}: {resolved} is not a folder (kind = "hf" needs a local Hugging Face '
                "model folder with config.json and the weights)"
            )
        if not (resolved / "config.json").is_file():
            raise UserError(
                f"{key}: {resolved} has no config.json: not a Hugging Face model folder"
            )
    if model.kind == "savedmodel" and not (resolved / "saved_model.pb").is_file():
        raise UserError(
            f"{key}: {resolved} is not a TensorFlow SavedModel folder (no saved_model.pb in it;"
            " write one with tf.saved_model.save or model.export)"
        )
    if model.kind == "openvino":
        weights = resolved.with_suffix(".bin")
        if not resolved.is_file():
            raise UserError(f"{key}: {resolved} is not a file")
        if not weights.is_file():
            raise UserError(
                f"{key}: the weights file {weights} is missing (an OpenVINO IR is a .xml "
                "with a .bin of the same name next to it)"
            )
    return str(resolved)


def _check_weights(model: ModelSpec, base_dir: str | None, origin: str) -> str | None:
    """Refuse a weights file here, before any build, rather than in every worker.

    A pickle-based file is opened with torch's weights-only unpickler, which
    refuses anything but tensors and plain containers without running it; torch
    is imported for this only (kind = "torch" workloads import it with their
    factory anyway). Whether the keys fit the architecture needs the model,
    which only workers build: that check comes with the reference build.
    """
    if model.weights is None:
        return None
    resolved = _resolve(base_dir, model.weights)
    key = f"{origin}: model.weights = {model.weights!r}"
    if not resolved.is_file():
        raise UserError(f"{key}: {resolved} does not exist")
    from bakeoff.models import check_weights_file

    check_weights_file(str(resolved), key)
    return str(resolved)


def _check_hf_folder(model: ModelSpec, folder: str, origin: str) -> tuple[Any, list[str]]:
    """The folder's config, read without running any code it ships; and notes for the user."""
    from transformers import AutoConfig

    key = f"{origin}: model.path = {model.path!r}"
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # transformers raises ValueError, OSError or KeyError here
        text = str(exc)
        if "trust_remote_code" in text or "custom code" in text:
            raise UserError(
                f"{key}: this model needs code shipped in its folder (trust_remote_code); "
                "bakeoff never runs a model folder's own code. Use a model type built into "
                'transformers, or give the model as kind = "torch" with your own factory.'
            ) from None
        raise UserError(
            f"{key}: cannot read its config.json: {type(exc).__name__}: {exc}"
        ) from None
    notes: list[str] = []
    if (model.task or DEFAULT_HF_TASK) == "sequence-classification":
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES as with_head,
        )

        if config.model_type not in with_head:
            raise UserError(
                f"{key}: task = 'sequence-classification': transformers has no sequence "
                f"classification model for model_type {config.model_type!r}"
            )
        architectures = list(getattr(config, "architectures", None) or [])
        if any(a.endswith("ForSequenceClassification") for a in architectures):
            if model.num_labels is not None and model.num_labels != config.num_labels:
                raise UserError(
                    f"{origin}: model.num_labels = {model.num_labels}, but the folder's trained "
                    f"classification head has {config.num_labels} labels; leave num_labels out"
                )
        else:
            n = model.num_labels or config.num_labels
            notes.append(
                f"model.path = {model.path!r} has no trained sequence-classification head "
                f"(its config lists {architectures or 'no architectures'}): bakeoff adds one "
                f"with {n} labels, UNTRAINED, initialised from a fixed seed so every process "
                "builds the same one. Its predictions mean nothing; the agreement gate still "
                "shows whether a runtime or precision changes the model's decisions."
            )
    return config, notes


# Files that carry a tokenizer's vocabulary: without one, transformers builds an
# empty tokenizer that maps every word to [UNK] instead of failing.
_TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "spm.model",
    "sentencepiece.bpe.model",
)


def read_text_lines(path: Path, key: str) -> list[str]:
    """One text per line, surrounding whitespace dropped, blank lines skipped."""
    if not path.is_file():
        raise UserError(f"{key}: {path} does not exist")
    try:
        content = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{key}: {path} is not UTF-8 text: {exc}") from None
    texts = [line.strip() for line in content.splitlines() if line.strip()]
    if not texts:
        raise UserError(f"{key}: {path} is empty (expected one text per line)")
    return texts


def tokenize_texts(
    folder: str, texts: list[str], max_length: int, key: str
) -> dict[str, np.ndarray]:
    """input_ids and attention_mask (int64), every text padded or cut to max_length
    tokens, so any batch of samples stacks and the benchmark runs that length."""
    if not any((Path(folder) / name).is_file() for name in _TOKENIZER_FILES):
        raise UserError(
            f"{key}: the model folder {folder} has no tokenizer (none of "
            f"{', '.join(_TOKENIZER_FILES)}); give token ids with data.path or data.factory"
        )
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            folder, local_files_only=True, trust_remote_code=False
        )
        if len(tokenizer) <= len(set(tokenizer.all_special_tokens)):
            raise ValueError("the tokenizer has no vocabulary beyond its special tokens")
        enc = tokenizer(
            texts,
            padding="max_length",
            truncation=True,
            max_length=max_length,
            return_tensors="np",
        )
    except Exception as exc:  # tokenizers raise ValueError, OSError, TypeError...
        raise UserError(
            f"{key}: cannot tokenize with the tokenizer in {folder}: {type(exc).__name__}: {exc}"
        ) from None
    return {
        "input_ids": np.asarray(enc["input_ids"], dtype=np.int64),
        "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int64),
    }


def _text_data(
    data: DataSpec, folder: str, config: Any, base_dir: str | None, origin: str
) -> dict[str, np.ndarray]:
    assert data.text is not None
    key = f"{origin}: data.text = {data.text!r}"
    max_length = data.max_length or DEFAULT_MAX_LENGTH
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int) and max_length > limit:
        raise UserError(
            f"{origin}: data.max_length = {max_length}: the model takes at most {limit} tokens"
        )
    texts = read_text_lines(_resolve(base_dir, data.text), key)
    return tokenize_texts(folder, texts, max_length, key)


def _check_jax_model(model: ModelSpec, base_dir: str | None, origin: str) -> str:
    """The params file, checked without importing jax (or the user's module, which
    imports it) in this process: the function itself is looked up in the worker."""
    import importlib.util

    assert model.function is not None and model.params is not None
    module_name = model.function.partition(":")[0]
    with on_path(base_dir):
        try:
            found = importlib.util.find_spec(module_name) is not None
        except (ImportError, ValueError):
            found = False
    if not found:
        where = f" (looked next to the workload, in {base_dir})" if base_dir else ""
        raise UserError(
            f"{origin}: model.function = {model.function!r}: no module {module_name!r}{where}"
        )
    resolved = _resolve(base_dir, model.params)
    key = f"{origin}: model.params = {model.params!r}"
    if not resolved.is_file():
        raise UserError(f"{key}: {resolved} does not exist")
    if resolved.suffix == ".npz":
        try:
            with np.load(resolved, allow_pickle=False) as z:
                for name in z.files:
                    z[name]  # allow_pickle=False refuses object arrays: never unpickle
        except (ValueError, OSError) as exc:
            raise UserError(f"{key}: not a readable .npz of numeric arrays: {exc}") from None
    return str(resolved)


def workload_from_spec(spec: WorkloadSpec, origin: str, base_dir: str | None) -> Workload:
    """A spec of the user's own model, with its data (a spec naming a built-in model
    is merged with it by `bakeoff.loader`)."""
    if spec.model.kind == "builtin":
        raise ValueError("a built-in model's spec is loaded by bakeoff.loader.load_workload")
    assert spec.data is not None
    model_path = _check_model_path(spec.model, base_dir, origin)
    if spec.model.kind == "torch" and spec.model.factory:
        import_factory(spec.model.factory, base_dir, origin, "model.factory")  # fail early
    weights = _check_weights(spec.model, base_dir, origin)
    if spec.model.kind == "jax":
        weights = _check_jax_model(spec.model, base_dir, origin)
    hf_config: Any = None
    notes: list[str] = []
    if spec.model.kind == "hf":
        assert model_path is not None
        hf_config, notes = _check_hf_folder(spec.model, model_path, origin)
    if spec.data.factory:
        make = import_factory(spec.data.factory, base_dir, origin, "data.factory")
        with on_path(base_dir):
            try:
                raw = make()
            except Exception as exc:
                raise UserError(
                    f"{origin}: data.factory = {spec.data.factory!r} raised "
                    f"{type(exc).__name__}: {exc}"
                ) from None
    elif spec.data.text is not None:
        assert model_path is not None  # data.text is for kind = "hf", which needs a path
        raw = _text_data(spec.data, model_path, hf_config, base_dir, origin)
    else:
        assert spec.data.path is not None
        raw = _load_data_file(Path(base_dir or ".", spec.data.path), origin)
    inputs, labels, layout = normalize_data(raw, origin, spec.data.batch_axes, spec.data.constants)
    _check_variable_axes(spec.data.variable_axes, inputs, layout, origin)
    if spec.quality.metric == "accuracy" and labels is None:
        raise UserError(
            f"{origin}: quality.metric = 'accuracy' needs labels: make data give (inputs, labels)"
            " or put a 'labels' array in the .npz"
        )
    is_hf = spec.model.kind == "hf"
    source = ModelSource(
        kind=spec.model.kind,
        factory=spec.model.factory,
        path=model_path,
        base_dir=base_dir,
        options=dict(spec.model.options),
        task=(spec.model.task or DEFAULT_HF_TASK) if is_hf else None,
        num_labels=spec.model.num_labels,
        weights=weights,
        variable_axes={k: sorted(set(v)) for k, v in spec.data.variable_axes.items()},
        function=spec.model.function,
        batch_axes=dict(layout.batch_axes),
        constants=list(layout.constants),
    )
    for note in notes:
        # Shown once on the terminal; kept in Workload.notes for reports.
        warnings.warn(f"{origin}: {note}", UserWarning, stacklevel=2)
    return Workload(
        spec=spec,
        origin=origin,
        source=source,
        inputs=inputs,
        labels=labels,
        notes=tuple(notes),
    )
