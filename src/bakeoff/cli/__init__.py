"""The `bakeoff` command: a thin Typer layer over bakeoff.api.

Exit codes: 0 a verdict named a winner (or the command did its job), 2 invalid
input, 130 Ctrl-C, 143 SIGTERM, 1 no winner or anything else. User errors print
a message, never a traceback.

One module per command group (run, train, runs, cache, advise, env, export, serve, sweep);
this one makes the app, registers their commands in the order --help lists them, and runs
it.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings
from typing import Annotated

import typer
from rich.markup import escape

from bakeoff import __version__
from bakeoff.cli import advise, cache, env, export, init, run, runs, serve, sweep, train
from bakeoff.cli.options import (
    HELP_OPTIONS,
    BakeoffCommand,
    BakeoffGroup,
    OptionalValueCommand,
)
from bakeoff.cli.output import err, out
from bakeoff.errors import BakeoffError, UserError

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Which deep learning stack should run this model, on this machine? Measured.",
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
    cls=BakeoffGroup,
)


def _print_version(asked: bool) -> None:
    if asked:
        out.print(f"bakeoff {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="print bakeoff's version and exit",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """Which deep learning stack should run this model, on this machine? Measured."""


# `--mlflow` may come without a value (OptionalValueCommand fills in ./mlruns).
app.command("run", cls=OptionalValueCommand)(run.run)
app.command("train", cls=OptionalValueCommand)(train.train_cmd)
for _name, _command in (
    ("ls", runs.ls),
    ("show", runs.show),
    ("env", env.env),
    ("export", export.export_cmd),
    ("serve", serve.serve_cmd),
    ("advise", advise.advise_cmd),
    ("init", init.init_cmd),
    ("report", runs.report_cmd),
    ("compare", runs.compare_cmd),
    ("sweep", sweep.sweep_cmd),
):
    app.command(_name, cls=BakeoffCommand)(_command)
app.add_typer(cache.cache_app, name="cache")

# Set when SIGTERM arrived, so the exit code can say so (Typer turns every
# KeyboardInterrupt into 130).
_terminated: list[int] = []


def _stop_on_sigterm(signum: int, frame: object) -> None:
    """`kill`, a CI job's timeout or a service manager stops a run as Ctrl-C does:
    workers are closed, the run is marked interrupted and its resume command printed,
    instead of the process vanishing mid-round."""
    _terminated.append(signum)
    raise KeyboardInterrupt


def _one_line(message: Warning | str, *_: object, **__: object) -> str:
    """A warning as one `warning:` line, not Python's file, line number and source."""
    return f"warning: {message}\n"


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.formatwarning = _one_line
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        # Without standalone mode click returns a command's typer.Exit code
        # instead of exiting with it.
        code = app(standalone_mode=False)
        if code == 130 and _terminated:
            code = 128 + signal.SIGTERM
        if isinstance(code, int) and code != 0:
            sys.exit(code)
    except UserError as exc:
        # escape: messages quote TOML ("[model] kind = ...") that Rich would eat as markup;
        # soft_wrap: one line per line of the message, never cut at the console's width
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except BakeoffError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted; finished results are in the store")
        sys.exit(128 + signal.SIGTERM if _terminated else 130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:  # Ctrl-C at a prompt, or a command that gave up
        sys.exit(1)
    except typer.TyperException as exc:
        # Usage errors (a missing argument, an unknown option). Typer vendors its own
        # click, so these are not `click.ClickException`s: catching that printed a
        # traceback instead of the one-line error.
        show = getattr(exc, "show", None)
        if show is None:
            raise
        show()
        sys.exit(int(getattr(exc, "exit_code", 2)))
