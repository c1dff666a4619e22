"""`bakeoff export`: a measured candidate's files, ready to deploy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bakeoff.cli.options import DEFAULT_STORE, RunIdArg, StoreOpt
from bakeoff.cli.output import mb, out


def export_cmd(
    run_id: RunIdArg,
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="the folder to write (new or empty); triton/tfserving: the model "
            "repository to add the model's folder to",
        ),
    ],
    candidate: Annotated[
        str | None,
        typer.Option("--candidate", help="a candidate id (default: the first verdict's winner)"),
    ] = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            help="plain (the files and manifest.json), triton (a Triton model repository) "
            "or tfserving (a SavedModel for TF Serving)",
        ),
    ] = "plain",
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Write a measured candidate's model files and manifest.json, ready to deploy."""
    from bakeoff import export
    from bakeoff.paths import check_writable

    check_writable(out_dir, "--out", folder=True)
    manifest = export.export(run_id, out_dir, candidate, store, format=format)
    files = ", ".join(f"{n} ({mb(i['bytes'])})" for n, i in manifest["files"].items())
    what = (
        f"{manifest['candidate']} ({manifest['runtime']} {manifest['runtime_version']}, "
        f"{manifest['precision']}) of run {manifest['run_id']}"
    )
    layout = manifest.get("layout")
    if layout is None:
        out.print(f"exported {what} to {out_dir}: {files}, manifest.json", highlight=False)
        out.print(
            f"[dim]load it: bakeoff.export.load({str(out_dir)!r}) -> predict(inputs), "
            f"or with {manifest['package']} alone (see docs/export.md)[/]",
            highlight=False,
        )
        return
    folder = out_dir / layout["model_name"]
    out.print(f"exported {what} to {folder}: {files}, manifest.json", highlight=False)
    # soft_wrap: a line per fact, never cut at the terminal's width (scripts read them)
    for line in _layout_lines(layout, out_dir):
        out.print(f"  {line}", highlight=False, soft_wrap=True)


def _layout_lines(layout: dict[str, Any], out_dir: Path) -> list[str]:
    """What the model repository's server is told, why, and how to start it."""
    name = layout["model_name"]
    if layout["format"] == "triton":
        dynamic = layout["dynamic_batching"]
        batching = (
            f"dynamic batching to {dynamic['preferred_batch_size'][0]}, waiting up to "
            f"{dynamic['max_queue_delay_microseconds']} µs"
            if dynamic
            else "no dynamic batching"
        )
        lines = [
            f"config.pbtxt: backend {layout['backend']}, max_batch_size "
            f"{layout['max_batch_size']}, {batching}, {layout['instances']} CPU instance(s), "
            + ", ".join(f"{k}={v}" for k, v in layout["parameters"].items()),
            *layout["why"],
            *(f"note: {n}" for n in layout["notes"]),
            f"serve it: tritonserver --model-repository {out_dir.resolve()}",
        ]
        return lines
    signature = layout.get("signature")
    lines = []
    if signature:
        inputs = ", ".join(f"{k} {v['dtype']} {v['shape']}" for k, v in signature["inputs"].items())
        outputs = ", ".join(
            f"{k} {v['dtype']} {v['shape']}" for k, v in signature["outputs"].items()
        )
        lines.append(f"SavedModel signature serving_default: {inputs} -> {outputs}")
    lines += [f"note: {n}" for n in layout["notes"]]
    flags = " ".join(layout["server_flags"])
    lines.append(
        f"serve it: docker run -p 8501:8501 -v {(out_dir / name).resolve()}:/models/{name} "
        f"-e MODEL_NAME={name} tensorflow/serving {flags}"
    )
    return lines
