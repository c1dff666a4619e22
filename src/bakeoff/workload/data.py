"""A workload's data: read, tokenized, and checked into named arrays.

Data comes from a factory, a .npz / .npy file, a text file tokenized by the
model folder's own tokenizer, or a Hugging Face dataset's columns (its text column
tokenized the same way). `normalize_data` makes any of them a dict of
numeric arrays, works out which axis of each holds the samples (the `Layout`)
and says, with the data's own names, how to fix arrays that disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import Layout
from bakeoff.data import sentences_path
from bakeoff.errors import UserError
from bakeoff.source import import_factory, on_path
from bakeoff.user_files import read_npy, read_npz, read_text
from bakeoff.workload.data_spec import DEFAULT_MAX_LENGTH, TEXT_INPUT, DataSpec
from bakeoff.workload.datasets_source import read_dataset
from bakeoff.workload.generated import generated_inputs, signature_of
from bakeoff.workload.spec import resolve_path


def read_data(
    data: DataSpec, model_path: str | None, hf_config: Any, base_dir: str | None, origin: str
) -> Any:
    """The data as its source gives it: what the factory returns, the file's arrays,
    the texts tokenized by the model folder (`model_path`, with its `hf_config`), or
    a dataset's columns with its labels."""
    if data.factory:
        make = import_factory(data.factory, base_dir, origin, "data.factory")
        with on_path(base_dir):
            try:
                return make()
            except Exception as exc:
                raise UserError(
                    f"{origin}: data.factory = {data.factory!r} raised {type(exc).__name__}: {exc}"
                ) from None
    if data.text is not None:
        assert model_path is not None  # data.text is for kind = "hf", which needs a path
        return text_data(data, model_path, hf_config, base_dir, origin)
    if data.dataset is not None:
        return dataset_data(data, model_path, hf_config, base_dir, origin)
    if data.generate is not None:
        if model_path is None:
            raise UserError(f"{origin}: data.generate needs the model's file (model.path)")
        gen = data.generate
        if hf_config is not None:  # a Hugging Face folder: text through its tokenizer
            return sample_text_inputs(model_path, hf_config, gen.samples, gen.sequence_length)
        signature = signature_of(model_path, origin)
        return generated_inputs(signature, gen.samples, gen.sequence_length, gen.seed)
    assert data.path is not None
    return load_data_file(Path(base_dir or ".", data.path), origin)


def sample_text_inputs(
    folder: str, config: Any, samples: int, length: int
) -> dict[str, np.ndarray]:
    """`samples` of the sentences bakeoff ships (in turn, from the first), tokenized by
    the folder's tokenizer to `length` tokens, or the model's limit if it is shorter."""
    texts = read_text_lines(sentences_path(), "bakeoff's sample sentences")
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int):
        length = min(length, limit)
    chosen = [texts[i % len(texts)] for i in range(samples)]
    return tokenize_texts(folder, chosen, length, f"{folder} with bakeoff's sample sentences")


def load_data_file(path: Path, origin: str) -> Any:
    label = f"{origin}: data.path = {str(path)!r}"
    if not path.exists():
        raise UserError(f"{label}: no such file")
    if path.suffix == ".npy":
        return read_npy(path, label)
    if path.suffix == ".npz":
        arrays = read_npz(path, label)
        labels = arrays.pop("labels", None)
        return (arrays, labels) if labels is not None else arrays
    raise UserError(f"{label}: expected a .npz or .npy file")


def text_data(
    data: DataSpec, folder: str, config: Any, base_dir: str | None, origin: str
) -> dict[str, np.ndarray]:
    assert data.text is not None
    key = f"{origin}: data.text = {data.text!r}"
    max_length = _max_length(data, config, origin)
    texts = read_text_lines(resolve_path(base_dir, data.text), key)
    return tokenize_texts(folder, texts, max_length, key)


def _max_length(data: DataSpec, config: Any, origin: str) -> int:
    max_length = data.max_length or DEFAULT_MAX_LENGTH
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int) and max_length > limit:
        raise UserError(
            f"{origin}: data.max_length = {max_length}: the model takes at most {limit} tokens"
        )
    return max_length


def dataset_data(
    data: DataSpec, folder: str | None, config: Any, base_dir: str | None, origin: str
) -> Any:
    """A dataset's columns by model input, the text column tokenized as data.text is;
    with its labels, (inputs, labels)."""
    columns, labels = read_dataset(data, base_dir, origin)
    inputs: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        if name != TEXT_INPUT:
            assert isinstance(values, np.ndarray)
            inputs[name] = values
            continue
        assert folder is not None  # columns.text is for kind = "hf", which needs a path
        assert isinstance(values, list)
        key = f"{origin}: [data] columns.{TEXT_INPUT} = {data.columns[TEXT_INPUT]!r}"
        tokens = tokenize_texts(folder, values, _max_length(data, config, origin), key)
        for token_input in tokens:
            if token_input in columns:
                raise UserError(
                    f"{origin}: [data] columns.{token_input}: the tokenizer makes the input "
                    f"{token_input!r} from the text column already; map the column to another "
                    "input or leave it out"
                )
        inputs.update(tokens)
    return (inputs, labels) if labels is not None else inputs


def read_text_lines(path: Path, key: str) -> list[str]:
    """One text per line, surrounding whitespace dropped, blank lines skipped."""
    if not path.is_file():
        raise UserError(f"{key}: {path} does not exist")
    content = read_text(path, f"{key}: {path}", "give UTF-8 text, one text per line")
    texts = [line.strip() for line in content.splitlines() if line.strip()]
    if not texts:
        raise UserError(f"{key}: {path} is empty (expected one text per line)")
    return texts


# Files that carry a tokenizer's vocabulary: without one, transformers builds an
# empty tokenizer that maps every word to [UNK] instead of failing.
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "spm.model",
    "sentencepiece.bpe.model",
)


def tokenize_texts(
    folder: str, texts: list[str], max_length: int, key: str
) -> dict[str, np.ndarray]:
    """input_ids and attention_mask (int64), every text padded or cut to max_length
    tokens, so any batch of samples stacks and the benchmark runs that length."""
    if not any((Path(folder) / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(
            f"{key}: the model folder {folder} has no tokenizer (none of "
            f"{', '.join(TOKENIZER_FILES)}); give token ids with data.path or data.factory"
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


def check_variable_axes(
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
