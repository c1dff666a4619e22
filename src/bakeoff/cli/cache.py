"""`bakeoff cache ls` and `bakeoff cache clear`: the variant cache."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.table import Table

from bakeoff.cli.options import BakeoffCommand, BakeoffGroup
from bakeoff.cli.output import mb, out, when
from bakeoff.errors import UserError
from bakeoff.report.fit import fitted

cache_app = typer.Typer(
    cls=BakeoffGroup,
    no_args_is_help=True,
    help="The variant cache: built variants shared between runs.",
)


@cache_app.command("ls", cls=BakeoffCommand)
def cache_ls(
    as_json: Annotated[bool, typer.Option("--json", help="print the entries as JSON")] = False,
) -> None:
    """List cached build steps: key, step, model, size, created, last used."""
    from bakeoff import cache

    found = cache.entries()
    where = cache.variants_dir()
    if as_json:
        payload = {"dir": str(where), "entries": [e.to_dict() for e in found]}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return
    if not found:
        out.print(f"the variant cache is empty ({where})")
        return
    t = Table(title=f"variant cache {where}")
    for col in ("key", "step", "model", "size", "built in", "created", "last used"):
        t.add_column(col)
    for e in found:
        t.add_row(
            e.key[:12],
            e.step,
            e.model_hash[:12],
            mb(e.bytes),
            f"{e.build_s:.1f} s",
            when(e.created),
            when(e.last_used),
        )
    out.print(fitted(t, out.width))
    total = sum(e.bytes for e in found)
    out.print(f"{len(found)} entries, {mb(total)}", highlight=False)


@cache_app.command("clear", cls=BakeoffCommand)
def cache_clear(
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
) -> None:
    """Remove every cached build step (run folders keep their own files)."""
    from bakeoff import cache

    found = cache.entries()
    if not yes and not sys.stdin.isatty():
        raise UserError("cache clear asks first, and there is no terminal to ask; pass --yes")
    if not yes:
        size = mb(sum(e.bytes for e in found))
        typer.confirm(
            f"remove {len(found)} entries ({size}) from {cache.variants_dir()}?", abort=True
        )
    done = cache.clear()
    shared = done.bytes - done.freed
    out.print(
        f"removed {done.entries} entries ({mb(done.bytes)}) from {done.where}; "
        f"{mb(done.freed)} freed"
        + (f", {mb(shared)} still held by run folders that share the files" if shared > 0 else ""),
        highlight=False,
    )
