"""The column names of a Parquet, CSV or JSON lines file, read from its head only:
enough for `--data` to map columns to a model's inputs before the `datasets`
library reads the whole table (workload/datasets_source.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from bakeoff.errors import UserError

__all__ = ["TABLE_SUFFIXES", "table_columns"]

TABLE_SUFFIXES = (".parquet", ".pq", ".csv", ".json", ".jsonl")


def table_columns(path: Path, label: str) -> list[str]:
    """The table's column names; a UserError naming `label` for a file that is no table."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
        with path.open(encoding="utf-8", newline="") as f:
            if suffix == ".csv":
                return [c.strip() for c in next(csv.reader(f), [])]
            head = f.read(1 << 20)
            if head.lstrip().startswith("["):  # a JSON array, not lines: read whole
                head += f.read()
            return _json_keys(head)
    except Exception as exc:
        gist = " ".join(str(exc).split())[:200]
        raise UserError(
            f"{label}: not a readable {suffix.lstrip('.')} table ({type(exc).__name__}: {gist})"
        ) from None


def _json_keys(head: str) -> list[str]:
    """The keys of the first record: a JSON lines file's first line, or the first object
    of a JSON array."""
    text = head.lstrip()
    if text.startswith("["):
        records = json.loads(text)
        first = records[0] if isinstance(records, list) and records else None
    else:
        first = json.loads(text.splitlines()[0]) if text else None
    if not isinstance(first, dict):
        raise ValueError("expected one JSON object per line, or an array of objects")
    return [str(k) for k in first]
