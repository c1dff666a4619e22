"""`bakeoff init`: the workload bakeoff would use for a model given alone, as a
commented TOML to edit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from bakeoff.cli.options import DataOpt
from bakeoff.cli.output import out
from bakeoff.errors import UserError
from bakeoff.paths import check_writable


def init_cmd(
    model: Annotated[
        str,
        typer.Argument(
            help="a model file or folder: ONNX, OpenVINO IR .xml, Keras .keras, a "
            "TensorFlow SavedModel or Hugging Face folder"
        ),
    ],
    data: DataOpt = None,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="the workload file to write (default: print it)"),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing -o file")] = False,
) -> None:
    """Write the workload `bakeoff run MODEL` would use, commented, to edit and run."""
    from bakeoff.model_file import is_model_path, spec_for_model, spec_toml
    from bakeoff.workload import parse_spec

    if not is_model_path(model):
        raise UserError(
            f"{model}: not a model file or folder (ONNX .onnx, OpenVINO IR .xml, Keras "
            ".keras, a TensorFlow SavedModel or Hugging Face folder); a workload .toml is "
            "already a workload"
        )
    text = spec_toml(spec_for_model(model, str(data) if data else None), model)
    parse_spec(text, model)  # what it writes, `bakeoff run` takes
    if output is None:
        sys.stdout.write(text)
        return
    if output.exists() and not force:
        raise UserError(f"-o {output}: the file exists; pass --force to replace it")
    check_writable(output, "-o")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    out.print(f"wrote {output}; measure it with: bakeoff run {output}", highlight=False)
