"""Argument and option types that several commands share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from bakeoff.paths import DEFAULT_STORE
from bakeoff.report.mlflow_log import DEFAULT_URI as MLFLOW_DEFAULT_URI

__all__ = [
    "DEFAULT_STORE",
    "MlflowOpt",
    "OptionalValueCommand",
    "RunIdArg",
    "StoreOpt",
    "WorkloadArg",
]

StoreOpt = Annotated[Path, typer.Option("--store", help="SQLite store of runs")]
RunIdArg = Annotated[str, typer.Argument(help="a run id (or a unique prefix)")]
WorkloadArg = Annotated[
    str | None, typer.Argument(help="a workload .toml or builtin:NAME (default builtin:minilm)")
]
MlflowOpt = Annotated[
    str | None,
    typer.Option(
        "--mlflow",
        metavar="[URI]",
        help=f"log the finished run to MLflow: a tracking URI or a folder (alone: "
        f"{MLFLOW_DEFAULT_URI}); needs the mlflow extra",
    ),
]

# The options that may be given alone, and the value they then take.
OPTIONAL_VALUES = {"--mlflow": MLFLOW_DEFAULT_URI}


def with_optional_values(args: list[str], defaults: dict[str, str]) -> list[str]:
    """`args` with each option of `defaults` that has no value after it (the last
    word, or another option next) given its default. Typer's own click has no
    option with an optional value, so `--mlflow` alone is spelled out before parsing.
    As in click's optional values, a word after the option is its value: `--mlflow
    w.toml` logs to w.toml; the workload goes first (or `--mlflow=URI`)."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":  # the rest are arguments, whatever they look like
            return out + args[i:]
        out.append(arg)
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg in defaults and (nxt is None or (nxt.startswith("-") and nxt != "-")):
            out.append(defaults[arg])
    return out


class OptionalValueCommand(TyperCommand):
    """A command whose options in OPTIONAL_VALUES may be given without a value."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, with_optional_values(args, OPTIONAL_VALUES))
