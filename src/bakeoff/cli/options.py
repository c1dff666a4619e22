"""Argument and option types that several commands share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bakeoff.paths import DEFAULT_STORE

__all__ = ["DEFAULT_STORE", "RunIdArg", "StoreOpt", "WorkloadArg"]

StoreOpt = Annotated[Path, typer.Option("--store", help="SQLite store of runs")]
RunIdArg = Annotated[str, typer.Argument(help="a run id (or a unique prefix)")]
WorkloadArg = Annotated[
    str | None, typer.Argument(help="a workload .toml or builtin:NAME (default builtin:minilm)")
]
