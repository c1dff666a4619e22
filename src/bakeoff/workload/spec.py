"""The workload spec: what a TOML file may say, as pydantic models.

Next to the bottom of `bakeoff.workload`: it builds on `data_spec` (the `[data]`
table), and every other module of the package builds on these models and names.
Each check here looks at the spec's own values (a runtime name, a file suffix, keys
that go together); what is on disk is checked by `bakeoff.workload.checks` and
`bakeoff.workload.data`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bakeoff.backends import DEVELOPMENT_VARIABLE, development, is_runtime, runtime_names
from bakeoff.errors import did_you_mean
from bakeoff.keras_models import KERAS_FILE_SUFFIXES
from bakeoff.source import PICKLE_SUFFIXES
from bakeoff.workload.data_spec import (
    TEXT_INPUT,
    DataSpec,
)
from bakeoff.workload.data_spec import Strict as _Strict

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
    # OpenVINO converts a SavedModel itself, without TensorFlow
    "savedmodel": ["tensorflow", "openvino"],
    # LiteRT runs the file as it is; OpenVINO reads a .tflite itself. ONNX Runtime is
    # left out: bakeoff converts no TFLite file to ONNX (its offer says why).
    "tflite": ["litert", "openvino"],
}


def default_runtimes(model_kind: str) -> list[str]:
    return list(DEFAULT_RUNTIMES_BY_KIND.get(model_kind, DEFAULT_RUNTIMES))


Precision = Literal["fp32", "fp16", "bf16", "int8", "int4"]
DEFAULT_PRECISIONS: tuple[Precision, ...] = ("fp32", "int8")
Metric = Literal["accuracy", "agreement", "cosine", "max_abs", "perplexity"]
# "cost": USD per million inferences, from [cost] usd_per_hour by machine type (on
# one machine, the most samples/s; across a cluster's machine types, the cheapest).
Objective = Literal["auto", "latency", "throughput", "cost"]
HfTask = Literal["feature-extraction", "sequence-classification", "text-generation"]
DEFAULT_HF_TASK: HfTask = "feature-extraction"
# Checkpoint formats model.weights accepts. safetensors holds tensors only; the
# pickle-based ones are read with torch.load(weights_only=True) and nothing else.
SAFETENSORS_SUFFIXES = (".safetensors",)
# kind = "jax" parameter files: numpy arrays (read with allow_pickle=False) or Flax msgpack.
JAX_PARAMS_SUFFIXES = (".npz", ".msgpack")
# kind = "tflite": a TFLite (LiteRT) flatbuffer, run as it is.
TFLITE_SUFFIX = ".tflite"


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
        more = did_you_mean(name, known)
        raise ValueError(f"unknown runtime {name!r}{more}; expected one of {', '.join(known)}")


def _check_keras_source(path: str | None, factory: str | None) -> None:
    if (path is None) == (factory is None):
        raise ValueError(
            'kind = "keras" needs exactly one of path = "model.keras" (saved with '
            'model.save, or a legacy .h5 file) or factory = "module:callable" returning a '
            "keras.Model"
        )
    if path is None or path.lower().endswith(KERAS_FILE_SUFFIXES):
        return
    raise ValueError(
        f'kind = "keras" needs path = "model.keras" (a Keras 3 file) or a legacy .h5 / '
        f'.hdf5 file, got {path!r}; for a TensorFlow SavedModel folder use kind = "savedmodel"'
    )


def resolve_path(base_dir: str | None, name: str) -> Path:
    """A path from the spec, relative to the workload file, made absolute: build
    steps change the working directory, so workers must never see a relative one."""
    return Path(base_dir or ".", name).absolute()


def _check_weights_key(kind: str, weights: str | None, weights_key: str) -> None:
    """weights_key names the state_dict inside a torch checkpoint dict: it needs one."""
    if kind != "torch":
        raise ValueError(f'weights_key is for kind = "torch" only, not kind = "{kind}"')
    if weights is None:
        raise ValueError(
            f'weights_key = {weights_key!r} needs weights = "checkpoint.pt": it names the '
            "state_dict inside that file"
        )
    if weights.endswith(SAFETENSORS_SUFFIXES):
        raise ValueError(
            f"weights_key is for a checkpoint dict (.pt, .pth, .bin); weights = {weights!r} is "
            "a safetensors file, a flat state_dict already: leave weights_key out"
        )


class ModelSpec(_Strict):
    kind: Literal[
        "torch",
        "hf",
        "onnx",
        "openvino",
        "keras",
        "jax",
        "savedmodel",
        "tflite",
        "builtin",
        "fake",
    ]
    name: str | None = Field(None, description="builtin: the built-in workload's name")
    factory: str | None = Field(None, description='"module:callable" returning a torch.nn.Module')
    weights: str | None = Field(
        None, description="torch: a state_dict file (.safetensors, .pt, .pth, .bin) to load"
    )
    weights_key: str | None = Field(
        None,
        min_length=1,
        description='torch: the key of the state_dict in a checkpoint dict ("a.b" nests)',
    )
    path: str | None = Field(
        None,
        description="a model file (onnx, OpenVINO IR .xml, .tflite) or a local folder (hf)",
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
        if kind == "fake" and not development():
            raise ValueError(
                'kind = "fake" is bakeoff\'s test double, not a model: give torch, hf, onnx, '
                "openvino, keras, jax, savedmodel, tflite or builtin "
                f"({DEVELOPMENT_VARIABLE}=1 allows it, for bakeoff's own tests)"
            )
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
        if self.kind == "tflite" and not (self.path or "").lower().endswith(TFLITE_SUFFIX):
            raise ValueError(
                f'kind = "tflite" needs path = "model.tflite" (a TFLite / LiteRT flatbuffer), '
                f"got {self.path!r}"
            )
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
        if self.weights_key is not None:
            _check_weights_key(self.kind, self.weights, self.weights_key)
        if self.task is not None and self.kind != "hf":
            raise ValueError(f'task is for kind = "hf" only, not kind = "{self.kind}"')
        if self.num_labels is not None and self.task != "sequence-classification":
            raise ValueError('num_labels needs kind = "hf" and task = "sequence-classification"')
        return self


class OutputQualitySpec(_Strict):
    """`[quality.per_output.<name>]`: one output judged its own way."""

    metric: Metric | None = None
    max_drop: float | None = Field(None, ge=0.0)


class QualitySpec(_Strict):
    metric: Metric = "cosine"
    max_drop: float = Field(0.01, ge=0.0)
    # A model with several outputs has every one judged (matched by name across
    # formats; judge/outputs.py) and fails on its worst: these choose which, and how.
    outputs: list[str] | None = Field(default=None, min_length=1)
    per_output: dict[str, OutputQualitySpec] = Field(default_factory=dict)
    # text-generation only: the greedy-token gate beside the perplexity rise
    min_token_agreement: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="text-generation: share of prompts whose first compared_tokens greedy "
        "tokens must equal the reference's (default 0.5)",
    )
    compared_tokens: PositiveInt | None = Field(
        default=None, description="text-generation: tokens compared per prompt (default 16)"
    )


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


class CostSpec(_Strict):
    """`[cost]`: what an hour of each machine type costs, for USD per million inferences."""

    usd_per_hour: dict[str, float] = Field(
        min_length=1,
        description='machine type -> USD per hour, e.g. { "c7i-2xlarge" = 0.357 }',
    )

    @model_validator(mode="after")
    def _positive(self) -> CostSpec:
        for machine, usd in self.usd_per_hour.items():
            if not usd > 0:
                raise ValueError(f"usd_per_hour.{machine}: a price above 0, not {usd}")
        return self


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


class TargetSpec(_Strict):
    metric: Literal["accuracy"] = "accuracy"
    value: float = Field(gt=0.0, le=1.0, description="the validation metric to reach")


class LoraSpec(_Strict):
    """`[train] lora`: the `lora` stack's adapters (peft's LoraConfig)."""

    targets: list[str] = Field(
        min_length=1, description='the modules that get adapters, e.g. ["query", "value"]'
    )
    rank: PositiveInt = 8
    alpha: float = Field(16.0, gt=0.0)
    train: list[str] = Field(
        default_factory=list, description="modules trained in full beside the adapters (a head)"
    )


class TrainSection(_Strict):
    """`[train]`: a training recipe, for `bakeoff train` (model: kind = "torch" with
    a factory that builds the untrained model)."""

    data: str = Field(
        description='an .npz with x_train, y_train, x_val, y_val, or "builtin:digits"'
    )
    loss: Literal["cross-entropy"] = "cross-entropy"
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    lr: float = Field(gt=0.0)
    schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="the learning rate over the steps, towards 0 at the end"
    )
    warmup_steps: NonNegativeInt = Field(
        0, description="steps first rising linearly to lr (fewer than steps)"
    )
    batch_size: PositiveInt = Field(64, description="the global batch")
    steps: PositiveInt
    eval_every: PositiveInt = 20
    target: TargetSpec
    stacks: list[str] | None = Field(None, description="default: every training stack")
    tolerance: float = Field(
        0.01, ge=0.0, description="final metric below the reference's by more: flagged"
    )
    lora: LoraSpec | None = Field(None, description="the lora stack's adapters")
    stack_lr: dict[str, Annotated[float, Field(gt=0.0)]] = Field(
        default_factory=dict,
        description="a learning rate of its own for a stack, e.g. { lora = 0.002 }",
    )

    @model_validator(mode="after")
    def _warmup_within_steps(self) -> TrainSection:
        if self.warmup_steps and self.warmup_steps >= self.steps:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) must be fewer than steps ({self.steps})"
            )
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
    train: TrainSection | None = None
    cost: CostSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _task_aware_metric(cls, raw: Any) -> Any:
        """A classifier's natural gate is top-1 agreement with the reference, not cosine
        (or accuracy, where its data names a labels column).

        Only fills in a metric the user left out, so every other workload keeps the
        cosine default; malformed input is left for the field validators to report.
        """
        if not isinstance(raw, dict):
            return raw
        model = raw.get("model")
        task = model.get("task") if isinstance(model, dict) else None
        # A generative model's natural gate is its perplexity (a relative rise of at
        # most 10% by default) beside the greedy-token agreement.
        metric, max_drop = {
            "sequence-classification": ("agreement", None),
            "text-generation": ("perplexity", 0.10),
        }.get(str(task), (None, None))
        # A classifier's data that names its labels column is judged on those labels.
        data = raw.get("data")
        if metric == "agreement" and isinstance(data, dict) and data.get("labels") is not None:
            metric = "accuracy"
        if metric is None:
            return raw
        quality = raw.get("quality", {})
        if not isinstance(quality, dict):
            return raw
        filled = {**quality}
        filled.setdefault("metric", metric)
        if max_drop is not None:
            filled.setdefault("max_drop", max_drop)
        return {**raw, "quality": filled}

    @model_validator(mode="after")
    def _data_needed(self) -> WorkloadSpec:
        if self.data is None and self.model.kind != "builtin" and self.train is None:
            raise ValueError(
                '[data] is required: give factory = "module:callable", path, dataset, or text '
                "(hf only)"
            )
        generating = self.model.task == "text-generation"
        prompts = self.data is not None and self.data.prompts is not None
        if generating and not prompts:
            raise ValueError(
                'task = "text-generation" needs [data] prompts = "prompts.txt" (one per line)'
            )
        if prompts and not generating:
            raise ValueError('data.prompts needs model.kind = "hf", task = "text-generation"')
        if generating != (self.quality.metric == "perplexity"):
            raise ValueError(
                'quality.metric = "perplexity" goes with task = "text-generation", and only it'
            )
        if not generating and (
            self.quality.min_token_agreement is not None or self.quality.compared_tokens is not None
        ):
            raise ValueError(
                'quality.min_token_agreement and compared_tokens are for task = "text-generation"'
            )
        if self.data is not None and self.data.text is not None and self.model.kind != "hf":
            raise ValueError(
                'data.text needs model.kind = "hf": texts are tokenized with the model '
                "folder's own tokenizer; for other models give data.factory or data.path"
            )
        if self.data is not None and TEXT_INPUT in self.data.columns and self.model.kind != "hf":
            raise ValueError(
                f'data.columns.{TEXT_INPUT} needs model.kind = "hf": texts are tokenized with the '
                "model folder's own tokenizer; for other models map numeric columns to the "
                "model's input names"
            )
        labels = [c.label for c in self.candidates]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"candidate labels must be unique; repeated: {', '.join(dupes)}")
        return self
