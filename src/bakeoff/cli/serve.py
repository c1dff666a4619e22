"""`bakeoff serve`: a run's winner (or an export folder) over the Open Inference
Protocol v2, batched as the run's measurements say pays on this machine."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bakeoff.cli.options import DEFAULT_STORE, StoreOpt
from bakeoff.cli.output import out
from bakeoff.errors import UserError

if TYPE_CHECKING:  # imported when serving: the serve extra may not be installed
    from bakeoff.serve.model import ServedSpec

_NEEDS = ("fastapi", "uvicorn", "prometheus_client")


def _auto_or(value: str, flag: str, minimum: float) -> float | None:
    """None for `auto`, else the number (at least `minimum`)."""
    if value == "auto":
        return None
    try:
        number = float(value)
    except ValueError:
        raise UserError(f"{flag} {value!r}: expected a number or auto") from None
    if number < minimum:
        raise UserError(f"{flag} {value}: expected at least {minimum:g}, or auto")
    return number


def _auto_or_int(value: str, flag: str) -> int | None:
    number = _auto_or(value, flag, 1)
    if number is not None and not number.is_integer():
        raise UserError(f"{flag} {value}: expected a whole number, or auto")
    return None if number is None else int(number)


def _print_plan(spec: ServedSpec, folder: Path, why: list[str]) -> None:
    """What is served from where, then why: the candidate, batching and instances."""
    # soft_wrap: a line per fact, never cut at the terminal's width (scripts read them)
    out.print(
        f"serving {spec.name} ({spec.platform}, {spec.description}) from {folder}",
        highlight=False,
        soft_wrap=True,
    )
    for line in why:
        out.print(f"  {line}", highlight=False, soft_wrap=True)


def serve_cmd(
    target: Annotated[str, typer.Argument(help="a run id (or prefix), or an export folder")],
    candidate: Annotated[
        str | None, typer.Option("--candidate", help="a candidate id (default: chosen, see auto)")
    ] = None,
    host: Annotated[
        str, typer.Option(help="address to bind (off loopback a token is required)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (0: any free one, printed)")] = 8000,
    max_batch_size: Annotated[
        str, typer.Option("--max-batch-size", help="rows per batch, or auto (from the run)")
    ] = "auto",
    max_queue_delay_ms: Annotated[
        str, typer.Option("--max-queue-delay-ms", help="longest a batch waits to fill, or auto")
    ] = "auto",
    instances: Annotated[
        str, typer.Option("--instances", help="model instances taking batches at once, or auto")
    ] = "auto",
    max_queue: Annotated[
        int, typer.Option("--max-queue", min=1, help="requests waiting before 503")
    ] = 256,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="BAKEOFF_SERVE_TOKEN", help="require Authorization: Bearer"),
    ] = None,
    max_body_mb: Annotated[
        float, typer.Option("--max-body-mb", min=0.001, help="largest request body")
    ] = 64.0,
    drain_s: Annotated[
        float, typer.Option("--drain-s", min=0.0, help="on SIGTERM, time left to finish requests")
    ] = 30.0,
    model_name: Annotated[
        str | None, typer.Option("--model-name", help="the name in the URLs (default: workload's)")
    ] = None,
    latency_bound_ms: Annotated[
        float | None,
        typer.Option(
            "--latency-bound-ms",
            help="auto: the p99 a batch size must meet (without it, batch 1's measured "
            "latency bounds the batch size and queue delay: printed at start)",
        ),
    ] = None,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Serve a measured candidate over the Open Inference Protocol (v2) REST API; a
    text-generation run's winner through its engine's own OpenAI-compatible server."""
    record = _generative_run(target, Path(store))
    if record is not None:
        raise typer.Exit(_serve_generative(record, candidate, host, port, token, Path(store)))
    missing = [m for m in _NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"bakeoff serve needs {', '.join(missing)}: pip install 'bakeoff[serve]'")
    from bakeoff.export import auto
    from bakeoff.serve import ExportedModel, ServeSettings, serve, server, source

    server.check_exposure(host, token)  # before anything is exported or loaded
    batch = _auto_or_int(max_batch_size, "--max-batch-size")
    delay = _auto_or(max_queue_delay_ms, "--max-queue-delay-ms", 0)
    n_instances = _auto_or_int(instances, "--instances")
    folder, why = source.export_folder(target, Path(store), candidate, batch, latency_bound_ms)
    model = ExportedModel(folder, model_name)
    spec = model.spec
    chosen = auto.choose(
        spec.measured, spec.batch_size, batch, delay, n_instances, latency_bound_ms
    )
    _print_plan(spec, folder, why + chosen.why)
    settings = ServeSettings(
        max_batch_size=chosen.max_batch_size,
        max_queue_delay_ms=chosen.max_queue_delay_ms,
        instances=chosen.instances,
        max_queue=max_queue,
        token=token,
        max_body_mb=max_body_mb,
        drain_s=drain_s,
    )
    code = serve(model, settings, host=host, port=port)
    if code:
        raise typer.Exit(code)


def _generative_run(target: str, store: Path) -> dict | None:
    """The stored run `target` when it is a text-generation run; None otherwise (an
    export folder, an inference run, or one the export path will name as missing)."""
    if Path(target).is_dir() or not store.exists():
        return None
    from bakeoff import api

    try:
        record = api.show_run(target, store)
    except UserError:
        return None
    return record if (record.get("settings") or {}).get("kind") == "generate" else None


def _serve_generative(
    record: dict, candidate: str | None, host: str, port: int, token: str | None, store: Path
) -> int:
    """The engine's own server for a generative run's candidate, in this process's
    place, or its command and why bakeoff does not start it (1)."""
    import os
    import sys

    from bakeoff.generation import serving
    from bakeoff.paths import RunFolder
    from bakeoff.serve.exposure import check_exposure

    check_exposure(host, token)
    doc = record["document"]
    c, why = serving.chosen_candidate(doc, candidate)
    folder = RunFolder.of(Path(store), doc["run_id"]).path
    engine = serving.engine_server(doc, c, folder, host, port, token)
    shown = serving.printable(engine.command, engine.env)
    if not engine.startable:
        out.print(f"not serving {c['id']} ({why}): {engine.why}", highlight=False, soft_wrap=True)
        if engine.command:
            out.print(f"  the command: {shown}", highlight=False, soft_wrap=True)
        return 1
    out.print(
        f"serving {c['id']} ({why}) through {engine.server} on http://{host}:{port}/v1; "
        f"requests name the model {engine.model!r}",
        highlight=False,
        soft_wrap=True,
    )
    out.print(f"  {shown}", highlight=False, soft_wrap=True)
    sys.stdout.flush()
    # The server replaces this process: a signal to it (Ctrl-C, SIGTERM) is the
    # server's, and nothing is left running behind it.
    os.execve(engine.command[0], engine.command, {**os.environ, **engine.env})
