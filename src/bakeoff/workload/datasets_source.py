"""`[data] dataset = { ... }`: a Hugging Face `datasets` dataset read offline into columns.

Local files only: Parquet, CSV, JSON (lines too) or Arrow files through the library's
own readers (`load_dataset` with `data_files`), or a `save_to_disk` folder
(`load_from_disk`). Nothing is fetched from the Hub, and nothing is left in the
library's cache under ~: files are prepared in a temporary folder, read into
memory and the folder removed. The columns that `[data] columns` and `labels` name
come back as arrays (images decoded by the library's own features), and the text
column as strings for `bakeoff.workload.data` to tokenize with the model's folder.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.errors import UserError
from bakeoff.workload.data_spec import TEXT_INPUT, DatasetSource, DataSpec
from bakeoff.workload.spec import resolve_path

INSTALL = "pip install 'bakeoff[datasets]'"
# File suffix -> the `datasets` reader, where `format` is left out.
FORMAT_BY_SUFFIX = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".arrow": "arrow",
}
# What save_to_disk writes at the top of its folder: one Dataset, or a DatasetDict.
DISK_MARKERS = ("state.json", "dataset_dict.json")
# The split `load_dataset` gives files it is handed without one.
FILES_SPLIT = "train"
# Arrow's names for text (a CSV's columns are large_string).
TEXT_DTYPES = ("string", "large_string")

Columns = dict[str, np.ndarray | list[str]]


def read_dataset(
    data: DataSpec, base_dir: str | None, origin: str
) -> tuple[Columns, np.ndarray | None]:
    """The columns `data.columns` names, by model input name (the text input as a
    list of strings, every other one as an array), and the labels column's integers."""
    source = data.dataset
    assert source is not None
    key = f"{origin}: data.dataset.path = {source.path!r}"
    path = resolve_path(base_dir, source.path)
    if not path.exists():
        raise UserError(_not_local(key, path, source))
    fmt = source.format or _infer_format(path, key)
    with _offline():
        try:
            import datasets
        except ImportError as exc:
            # Absent, it is the extra to install; present but broken, what broke too.
            broken = "" if exc.name == "datasets" else f" (it failed to import: {exc})"
            raise UserError(
                f"{key}: reading a dataset needs the `datasets` library{broken}: {INSTALL}"
            ) from None
        # datasets' cache is a folder of Arrow files that outlives the process;
        # the data is read into memory here, so a temporary one is enough.
        with tempfile.TemporaryDirectory(prefix="bakeoff-datasets-") as cache, _quiet(datasets):
            table = _load(datasets, path, fmt, source, cache, key)
            return _columns(table, data, origin)


def _not_local(key: str, path: Path, source: DatasetSource) -> str:
    name, split = source.path, source.split or "validation"
    return (
        f"{key}: {path} does not exist. bakeoff reads datasets offline, from local files "
        f"only (HF_DATASETS_OFFLINE=1). If {name!r} is a dataset on the Hugging Face Hub, "
        f"save it on a machine with network, e.g. datasets.load_dataset({name!r}, "
        f"split={split!r}).save_to_disk('my-dataset'), copy that folder here and give "
        'dataset = { path = "my-dataset", format = "disk" }; or give its Parquet, CSV or '
        "JSON files"
    )


def _infer_format(path: Path, key: str) -> str:
    if path.is_dir():
        if any((path / name).is_file() for name in DISK_MARKERS):
            return "disk"
        raise UserError(
            f"{key}: {path} is a folder but not one written by save_to_disk (no "
            f"{' or '.join(DISK_MARKERS)}); for a folder of data files give format = "
            '"parquet", "csv", "json" or "arrow"'
        )
    fmt = FORMAT_BY_SUFFIX.get(path.suffix.lower())
    if fmt is None:
        raise UserError(
            f"{key}: cannot tell the format from the suffix {path.suffix!r}; give format = "
            '"parquet", "csv", "json" (JSON lines too), "arrow" or "disk" (a save_to_disk '
            "folder)"
        )
    return fmt


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """Offline while `datasets` is imported (it reads these variables then) and while
    it reads: local files only, never the Hub."""
    names = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(dict.fromkeys(names, "1"))
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _quiet(datasets: Any) -> Iterator[None]:
    """No progress bars or log lines from the library in bakeoff's own output: a
    failed read is logged there before it raises, and the UserError says it all."""
    was_disabled = datasets.are_progress_bars_disabled()
    verbosity = datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        if not was_disabled:
            datasets.enable_progress_bars()


def _load(datasets: Any, path: Path, fmt: str, source: DatasetSource, cache: str, key: str) -> Any:
    """The split to read, as a `datasets.Dataset`."""
    try:
        if fmt == "disk":
            found = datasets.load_from_disk(str(path), keep_in_memory=True)
        else:
            # A folder's files are told apart into splits by the library, by their names
            # (train-*, validation-*, ...); one file is one split, named as the spec says.
            where = (
                {"data_dir": str(path)}
                if path.is_dir()
                else {"data_files": {source.split or FILES_SPLIT: str(path)}}
            )
            found = datasets.load_dataset(fmt, **where, cache_dir=cache, keep_in_memory=True)
    except Exception as exc:  # readers raise ArrowInvalid, ValueError, FileNotFoundError...
        raise UserError(
            f"{key}: cannot read it as format = {fmt!r}: {type(exc).__name__}: {exc}"
        ) from None
    if isinstance(found, datasets.Dataset):
        if source.split is not None:
            raise UserError(
                f"{key}: split = {source.split!r}, but the folder holds one dataset without "
                "splits (save_to_disk of a Dataset, not a DatasetDict); leave split out"
            )
        return found
    splits = list(found)
    if source.split is None:
        if len(splits) == 1:
            return found[splits[0]]
        raise UserError(
            f"{key}: it has several splits ({', '.join(splits)}); name one with "
            'split = "..." in data.dataset'
        )
    if source.split not in found:
        raise UserError(f"{key}: no split {source.split!r} (splits: {', '.join(splits)})")
    return found[source.split]


def _columns(table: Any, data: DataSpec, origin: str) -> tuple[Columns, np.ndarray | None]:
    present = list(table.column_names)
    wanted = [(f"columns.{name}", column) for name, column in data.columns.items()]
    if data.labels is not None:
        wanted.append(("labels", data.labels))
    for field, column in wanted:
        if column not in present:
            raise UserError(
                f"{origin}: [data] {field}: no column {column!r} in the dataset "
                f"(columns: {', '.join(present)})"
            )
    if table.num_rows == 0:
        raise UserError(f"{origin}: data.dataset: the split has no rows")
    inputs: Columns = {}
    for name, column in data.columns.items():
        field = f"{origin}: [data] columns.{name} = {column!r}"
        feature = table.features[column]
        if name == TEXT_INPUT:
            inputs[name] = _texts(table, column, feature, field)
        elif _is_text(feature):
            raise UserError(
                f"{field}: the column holds text; only the model input {TEXT_INPUT!r} takes "
                "text (tokenized by an hf model's folder: "
                f'columns = {{ {TEXT_INPUT} = "{column}" }})'
            )
        else:
            inputs[name] = _array(table, column, field)
    labels = None
    if data.labels is not None:
        field = f"{origin}: [data] labels = {data.labels!r}"
        labels = _labels(table, data.labels, table.features[data.labels], field)
    return inputs, labels


def _is_text(feature: Any) -> bool:
    return getattr(feature, "dtype", None) in TEXT_DTYPES


def _texts(table: Any, column: str, feature: Any, field: str) -> list[str]:
    if not _is_text(feature):
        raise UserError(
            f"{field}: the model input {TEXT_INPUT!r} takes a text column, but this one holds "
            f"{feature}; map numeric columns to the model's own input names"
        )
    texts = list(table[column])
    for row, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"{field}: row {row} has no text ({text!r})")
    return texts


def _array(table: Any, column: str, field: str) -> np.ndarray:
    """The column as one array: the library's numpy format decodes images and nested
    lists (floats come as float32, integers as int64)."""
    try:
        values = table.select_columns([column]).with_format("numpy")[:][column]
    except Exception as exc:  # a feature that cannot be decoded here (audio, video...)
        raise UserError(f"{field}: cannot decode it: {type(exc).__name__}: {exc}") from None
    values = np.asarray(values)
    if values.dtype == object:
        raise UserError(
            f"{field}: its rows differ in shape (or some are missing), so they do not stack "
            "into one array; make every row the same shape (resize images, pad sequences)"
        )
    return values


def _labels(table: Any, column: str, feature: Any, field: str) -> np.ndarray:
    values = None if _is_text(feature) else _array(table, column, field)
    if values is None or values.dtype.kind not in "iu" or values.ndim != 1:
        raise UserError(
            f"{field}: expected one integer class index per row (an integer or ClassLabel "
            f"column), but the column holds {feature}; a column of label names can be turned "
            "into indices with the library's Dataset.class_encode_column"
        )
    return values.astype(np.int64)
