"""Argument and option types that several commands share."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperGroup

from bakeoff.paths import DEFAULT_STORE
from bakeoff.report.mlflow_log import DEFAULT_URI as MLFLOW_DEFAULT_URI

__all__ = [
    "DEFAULT_STORE",
    "HELP_OPTIONS",
    "BakeoffCommand",
    "BakeoffGroup",
    "DataOpt",
    "MlflowOpt",
    "OptionalValueCommand",
    "RunIdArg",
    "StoreOpt",
    "WorkloadArg",
]

StoreOpt = Annotated[Path, typer.Option("--store", help="SQLite store of runs")]
RunIdArg = Annotated[str, typer.Argument(help="a run id (or a unique prefix)")]
WorkloadArg = Annotated[
    str | None,
    typer.Argument(
        help="a workload .toml; a model file or folder alone (ONNX, OpenVINO IR .xml, Keras "
        ".keras, a TensorFlow SavedModel or Hugging Face folder); or builtin:NAME (default "
        "builtin:minilm)"
    ),
]
DataOpt = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="with a model file or folder alone: its data, an .npz / .npy of its inputs, "
        "a Parquet / CSV / JSON lines table with a column per input (named after it), or "
        "for a Hugging Face folder a .txt of texts (one a line) or a table with a text "
        "column; without it, inputs are generated from the model's signature",
    ),
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


# `-h` as well as `--help`, on every command (click's contexts inherit it).
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}


def readable_help(text: str) -> str:
    """`text` (a docstring or an option's help) as the terminal should show it: Typer
    renders help as Rich markup, which would eat a bracketed word ("a .toml with a
    [train] section" lost "[train]"), and in that mode keeps a docstring's line breaks,
    which then break mid-sentence in the commands list; so it is escaped and each
    paragraph joined into one line for the terminal to wrap."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return escape("\n\n".join(" ".join(p.split()) for p in paragraphs))


class _Readable:
    """What BakeoffCommand and BakeoffGroup share: help read as written, a flag with
    no `<bool>` type, arguments in capitals in the usage line (`RUN_ID`, not
    Typer's `{run_id}`)."""

    params: list[Any]
    help: str | None

    def _make_readable(self) -> None:
        if self.help:
            self.help = readable_help(self.help)
        for param in self.params:
            text = getattr(param, "help", None)
            if text:
                param.help = readable_help(text)
            if isinstance(param, TyperArgument) and param.metavar is None and param.name:
                param.metavar = param.name.upper()
            elif getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces: list[str] = super().collect_usage_pieces(ctx)  # type: ignore[misc]
        return [re.sub(r"^\{(.+)\}", r"\1", p) for p in pieces]


class BakeoffCommand(_Readable, TyperCommand):
    """Every bakeoff command's class (see _Readable)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._make_readable()


class BakeoffGroup(_Readable, TyperGroup):
    """The `bakeoff` and `bakeoff cache` groups' class (see _Readable)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._make_readable()


class OptionalValueCommand(BakeoffCommand):
    """A command whose options in OPTIONAL_VALUES may be given without a value."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, with_optional_values(args, OPTIONAL_VALUES))
