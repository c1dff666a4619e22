"""`bakeoff export`: a measured candidate's files, ready to deploy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bakeoff.cli.options import DEFAULT_STORE, RunIdArg, StoreOpt
from bakeoff.cli.output import mb, out


def export_cmd(
    run_id: RunIdArg,
    out_dir: Annotated[Path, typer.Option("--out", help="the folder to write (new or empty)")],
    candidate: Annotated[
        str | None,
        typer.Option("--candidate", help="a candidate id (default: the first verdict's winner)"),
    ] = None,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Write a measured candidate's model files and manifest.json, ready to deploy."""
    from bakeoff import export

    manifest = export.export(run_id, out_dir, candidate, store)
    files = ", ".join(f"{n} ({mb(i['bytes'])})" for n, i in manifest["files"].items())
    out.print(
        f"exported {manifest['candidate']} ({manifest['runtime']} "
        f"{manifest['runtime_version']}, {manifest['precision']}) of run {manifest['run_id']} "
        f"to {out_dir}: {files}, manifest.json",
        highlight=False,
    )
    out.print(
        f"[dim]load it: bakeoff.export.load({str(out_dir)!r}) -> predict(inputs), "
        f"or with {manifest['package']} alone (see the README)[/]",
        highlight=False,
    )
