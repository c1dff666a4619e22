"""A model file or folder given alone, made a workload.

`bakeoff run model.onnx` should not need a workload file first. The spec written
here is the one a user would write: the model's kind from its file (ONNX, OpenVINO
IR, a Keras file, a TFLite file, a TensorFlow SavedModel folder, a Hugging Face folder, its task
read from its config), and its data from `--data` or, without it, made for it:
inputs generated from the model's own signature (`[data] generate`, see
workload/generated.py), and for a Hugging Face text model the sentences bakeoff
ships, tokenized by the folder's own tokenizer. A table given as `--data` feeds
each input from the column of its name (a Hugging Face folder: the text column).
`bakeoff init` writes the same spec as a commented TOML to edit, so
`bakeoff init m.onnx -o w.toml && bakeoff run w.toml` measures what
`bakeoff run m.onnx` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bakeoff.data import sentences_path
from bakeoff.errors import UserError
from bakeoff.workload.data_spec import TEXT_INPUT
from bakeoff.workload.generated import signature_of
from bakeoff.workload.table_columns import TABLE_SUFFIXES, table_columns

__all__ = ["is_model_path", "spec_for_model", "spec_toml"]

# A single file of one of these kinds is a model; a folder is one when it holds a
# Hugging Face config.json or a TensorFlow saved_model.pb.
_KINDS_BY_SUFFIX = {
    ".onnx": "onnx",
    ".xml": "openvino",
    ".keras": "keras",
    ".h5": "keras",  # a legacy tf.keras / Keras 2 file, which Keras 3 loads
    ".hdf5": "keras",
    ".tflite": "tflite",  # run as it is (LiteRT), or read by OpenVINO
}
# Files people will try that are not (yet) a workload alone, and what to do instead.
_NOT_YET = {
    ".pt": "a PyTorch checkpoint",
    ".pth": "a PyTorch checkpoint",
    ".safetensors": "a safetensors file",
    ".bin": "a weights file",
}


# A Hugging Face folder's text column, where --data's table has several: the first of
# these names it has.
TEXT_COLUMNS = ("text", "sentence")


def is_model_path(ref: str) -> bool:
    """Whether `ref` names a model file or folder rather than a workload .toml."""
    path = Path(ref)
    if path.suffix == ".toml":
        return False
    if path.is_dir():
        return True
    return path.suffix.lower() in (*_KINDS_BY_SUFFIX, *_NOT_YET)


def spec_for_model(ref: str, data: str | None = None) -> dict[str, Any]:
    """The workload spec (as TOML would give it) for the model at `ref`, with the
    data file `data` or, without it, data made for the model."""
    path = Path(ref).resolve()
    if not path.exists():
        raise UserError(f"{ref}: no such model file or folder")
    model, default_data = _model(ref, path)
    spec: dict[str, Any] = {"name": path.stem if path.is_file() else path.name}
    spec["description"] = f"{ref}, given alone"
    spec["model"] = model
    spec["data"] = _data(data, model) if data else default_data
    if model["kind"] == "hf" and model.get("task") == "text-generation":
        # prompts, not inputs: the generative bake-off's data (its own --data is refused)
        spec["data"] = {"prompts": str(sentences_path())}
    else:
        spec["quality"] = {"metric": "cosine", "max_drop": 0.01}
    return spec


def _model(ref: str, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    if path.is_dir():
        if (path / "config.json").is_file():
            model = {"kind": "hf", "path": str(path), "task": _hf_task(path, ref)}
            return model, {"generate": {}}
        if (path / "saved_model.pb").is_file():
            return {"kind": "savedmodel", "path": str(path)}, {"generate": {}}
        raise UserError(
            f"{ref}: a folder that is no model bakeoff knows (no config.json of a Hugging "
            "Face model, no saved_model.pb): give a model file, or a workload .toml"
        )
    suffix = path.suffix.lower()
    if suffix in _KINDS_BY_SUFFIX:
        kind = _KINDS_BY_SUFFIX[suffix]
        return {"kind": kind, "path": str(path)}, {"generate": {}}
    raise UserError(
        f"{ref}: {_NOT_YET.get(suffix, 'this file')} given alone is not a workload yet: "
        "write a workload .toml that names it and its data (docs/workloads.md), or export "
        "the model to ONNX and run the .onnx file"
    )


def _hf_task(folder: Path, ref: str) -> str:
    """The task a Hugging Face folder's config says its model does."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{ref}/config.json: not a readable JSON file ({exc})") from None
    architectures = (config.get("architectures") or []) if isinstance(config, dict) else []
    names = " ".join(str(a) for a in architectures)
    if "ForSequenceClassification" in names:
        return "sequence-classification"
    if "ForCausalLM" in names or "LMHeadModel" in names:
        return "text-generation"
    return "feature-extraction"


def _data(data: str, model: dict[str, Any]) -> dict[str, Any]:
    path = Path(data).resolve()
    kind = model["kind"]
    if not path.is_file():
        raise UserError(f"--data {data}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".npz", ".npy"):
        return {"path": str(path)}
    if suffix == ".txt":
        if kind != "hf":
            raise UserError(
                f"--data {data}: a text file feeds a Hugging Face folder's tokenizer; for an "
                f"{kind} model give its inputs as an .npz (one array per input), or a table "
                "with a column per input"
            )
        return {"text": str(path)}
    if suffix in TABLE_SUFFIXES:
        return {"dataset": {"path": str(path)}, "columns": _columns_for(data, path, model)}
    raise UserError(
        f"--data {data}: expected an .npz or .npy of the model's inputs, a Parquet, CSV or "
        "JSON lines table (a column per input; for a Hugging Face folder a text column), "
        "or a .txt of texts (one a line) for a Hugging Face folder"
    )


def _columns_for(data: str, path: Path, model: dict[str, Any]) -> dict[str, str]:
    """Which column feeds which model input: the input's own name, and for a Hugging
    Face folder the text column (named text or sentence, or the table's only column)."""
    columns = table_columns(path, f"--data {data}")
    listed = ", ".join(columns) or "none"
    if model["kind"] == "hf":
        found = next((c for c in TEXT_COLUMNS if c in columns), None)
        if found is None and len(columns) == 1:
            found = columns[0]
        if found is None:
            raise UserError(
                f"--data {data}: which column holds the text? none is named "
                f"{' or '.join(TEXT_COLUMNS)} (columns: {listed}); rename it, or write the "
                f"workload with `bakeoff init {model['path']} --data {data} -o w.toml` and "
                'set [data] columns = { text = "YOUR_COLUMN" }'
            )
        return {TEXT_INPUT: found}
    inputs = [s.name for s in signature_of(model["path"], f"--data {data}")]
    missing = [name for name in inputs if name not in columns]
    if missing:
        raise UserError(
            f"--data {data}: no column for the model input(s) {', '.join(missing)} (the model "
            f"takes {', '.join(inputs)}; the table has {listed}); name each column after the "
            "input it feeds, or write the workload with `bakeoff init` and map them in "
            "[data] columns"
        )
    return {name: name for name in inputs}


def spec_toml(spec: dict[str, Any], ref: str) -> str:
    """`spec` as a commented workload TOML (what `bakeoff init` writes)."""
    lines = [
        f"# The workload bakeoff uses for {ref} given alone; edit it and run",
        "# `bakeoff run THIS_FILE`. Every key: docs/workloads.md.",
        f"name = {_value(spec['name'])}",
        f"description = {_value(spec['description'])}",
        "",
        "[model]",
        *(f"{k} = {_value(v)}" for k, v in spec["model"].items()),
        "",
        "[data]",
    ]
    data = spec["data"]
    if "generate" in data and spec["model"]["kind"] == "hf":
        lines += [
            "# Inputs made by bakeoff: its own sample sentences, tokenized by the folder's",
            "# tokenizer to sequence_length tokens. Give your own texts instead with",
            '# text = "texts.txt" (one a line).',
            "generate = { samples = 128, sequence_length = 128, seed = 0 }",
        ]
    elif "generate" in data:
        lines += [
            "# Inputs made from the model's signature: dynamic axes but the batch are",
            "# sequence_length long; integer inputs stay within the model's vocabulary.",
            '# Give your own instead with path = "inputs.npz" (one array per input).',
            "generate = { samples = 128, sequence_length = 128, seed = 0 }",
        ]
    elif "dataset" in data:
        lines += [
            "# A table read by the `datasets` library: each model input (the key) from a",
            "# column (the value); for a Hugging Face folder the text column feeds text.",
            *(f"{k} = {_value(v)}" for k, v in data.items()),
        ]
    else:
        lines += [f"{k} = {_value(v)}" for k, v in data.items()]
    if "quality" in spec:
        lines += [
            "",
            "[quality]",
            "# How a candidate's outputs are compared with the FP32 reference's.",
            *(f"{k} = {_value(v)}" for k, v in spec["quality"].items()),
        ]
    return "\n".join([*lines, ""])


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(str(v))  # a TOML basic string is a JSON string
