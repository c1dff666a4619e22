"""Workload specs: a TOML file validated with pydantic, and the data it names.

A spec says what model, what data, how quality is judged and what to search.
`workload_from_spec` turns a spec into a `Workload`: the spec plus the data
arrays, ready for the orchestrator (`bakeoff.loader.load_workload` reads a
reference, built-in or file). Every mistake in a spec becomes a `UserError`
that names the file, the key and what was expected.

The modules, bottom first; each imports only from those below it:

- `data_spec`: the `[data]` table's models, and `Strict`, the base of every spec model;
- `spec`: the rest of the pydantic models, the runtime and precision defaults, and the
  checks of the spec's own values;
- `parse`: TOML text to a `WorkloadSpec`, pydantic's errors rewritten for people;
- `checks`: the model files and folders the spec names, checked on disk;
- `datasets_source`: a Hugging Face dataset's columns, read offline (`[data] dataset`);
- `generated`: inputs made from a model file's own signature (`[data] generate`);
- `data`: the data read (factory, .npz / .npy, tokenized text, a dataset, generated)
  and normalized;
- `build`: `Workload` and `workload_from_spec`, which put the others together;
- `generation`: a text-generation workload (`GenerationWorkload`): the folder, its
  prompts and held-out text as token ids.

Everything other modules use is imported from here, `bakeoff.workload`.
"""

from bakeoff.workload.build import Workload, workload_from_spec
from bakeoff.workload.checks import check_model_files
from bakeoff.workload.data import normalize_data, read_text_lines, tokenize_texts
from bakeoff.workload.data_spec import (
    DEFAULT_MAX_LENGTH,
    DatasetFormat,
    DatasetSource,
    DataSpec,
    GeneratedSpec,
)
from bakeoff.workload.generation import (
    GenerationWorkload,
    generation_workload_from_spec,
    is_generation,
)
from bakeoff.workload.parse import MODEL_KEYS_BY_KIND, parse_spec, parse_spec_file
from bakeoff.workload.spec import (
    DEFAULT_HF_TASK,
    DEFAULT_PRECISIONS,
    DEFAULT_RUNTIMES,
    DEFAULT_RUNTIMES_BY_KIND,
    JAX_PARAMS_SUFFIXES,
    KERAS_DEFAULT_RUNTIMES,
    MXNET_RETIRED,
    MXNET_SUFFIXES,
    PRECISIONS,
    SAFETENSORS_SUFFIXES,
    CandidateSpec,
    ConstraintsSpec,
    CostSpec,
    HfTask,
    Metric,
    ModelSpec,
    Objective,
    Precision,
    QualitySpec,
    SearchSpec,
    WorkloadSpec,
    default_runtimes,
)

__all__ = [
    "DEFAULT_HF_TASK",
    "DEFAULT_MAX_LENGTH",
    "DEFAULT_PRECISIONS",
    "DEFAULT_RUNTIMES",
    "DEFAULT_RUNTIMES_BY_KIND",
    "JAX_PARAMS_SUFFIXES",
    "KERAS_DEFAULT_RUNTIMES",
    "MODEL_KEYS_BY_KIND",
    "MXNET_RETIRED",
    "MXNET_SUFFIXES",
    "PRECISIONS",
    "SAFETENSORS_SUFFIXES",
    "CandidateSpec",
    "ConstraintsSpec",
    "CostSpec",
    "DataSpec",
    "DatasetFormat",
    "DatasetSource",
    "GeneratedSpec",
    "GenerationWorkload",
    "HfTask",
    "Metric",
    "ModelSpec",
    "Objective",
    "Precision",
    "QualitySpec",
    "SearchSpec",
    "Workload",
    "WorkloadSpec",
    "check_model_files",
    "default_runtimes",
    "generation_workload_from_spec",
    "is_generation",
    "normalize_data",
    "parse_spec",
    "parse_spec_file",
    "read_text_lines",
    "tokenize_texts",
    "workload_from_spec",
]
