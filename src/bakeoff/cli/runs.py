"""The commands on stored runs: ls, show, report and compare."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from bakeoff import api
from bakeoff.cli.options import DEFAULT_STORE, RunIdArg, StoreOpt
from bakeoff.cli.output import err, out, when
from bakeoff.errors import UserError
from bakeoff.paths import check_writable, resume_command
from bakeoff.report.fit import fitted


def ls(
    store: StoreOpt = DEFAULT_STORE,
    limit: Annotated[int, typer.Option("--limit", help="how many runs to list, newest first")] = 20,
) -> None:
    """List stored runs, newest first."""
    runs = api.list_runs(store, limit)
    if not runs:
        # The store is relative to the folder a command runs in: run elsewhere and an
        # empty list would say nothing of where the runs went.
        where = (
            f"; the store is {DEFAULT_STORE} under the folder a command runs in: run this "
            "where you ran `bakeoff run`, or pass --store PATH"
            if store == DEFAULT_STORE
            else ""
        )
        out.print(f"no runs in {store.resolve()}{where}", highlight=False, soft_wrap=True)
        return
    t = Table()
    for col in ("run id", "when", "workload", "status", "candidates", "winners"):
        t.add_column(col)
    for r in runs:
        created = when(r["created_at"])
        winners = (
            ", ".join(
                f"{'b' if isinstance(key, int) else ''}{key}: {w}" for key, w in r["winners"] if w
            )
            or "-"
        )
        t.add_row(r["run_id"], created, r["workload"], r["status"], str(r["candidates"]), winners)
    out.print(fitted(t, out.width))
    out.print(f"store: {store.resolve()}", style="dim", highlight=False)


def show(
    run_id: RunIdArg,
    store: StoreOpt = DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="print the JSON document")] = False,
) -> None:
    """Show one stored run: the table and the verdicts, or its JSON."""
    from bakeoff.report.terminal import print_any_kind, print_result

    record = api.show_run(run_id, store)
    doc = record["document"]
    if as_json:
        sys.stdout.write(json.dumps(doc or record, indent=2) + "\n")
        return
    if doc is None:
        rid, status = record["run_id"], record["status"]
        resume = f"`{resume_command(rid, store, record['settings'].get('kind', 'run'))}`"
        if status == "running":  # or killed (SIGKILL) before it could say otherwise
            out.print(
                f"run {rid} has not finished: it is running, or it was killed; "
                f"if no process is running it, {resume} finishes it",
                highlight=False,
            )
        else:
            out.print(f"run {rid} is {status}; {resume} finishes it", highlight=False)
        out.print("candidates so far:")
        for c in record["candidates"]:
            state = "not finished" if c["status"] == "pending" else c["status"]
            reason = f" - {escape(c['reason'])}" if c.get("reason") else ""
            out.print(f"  {c['id']}: {state}{reason}", highlight=False)
        return
    if doc.get("kind") == "train":
        from bakeoff.cli.train import print_training

        print_training(doc)
        return
    if doc.get("kind") == "generate":
        from bakeoff.cli.generation import print_generation

        print_generation(doc)
        return
    if doc.get("kind") not in (None, "inference"):  # a kind with no table of its own
        print_any_kind(doc, out)
        return
    print_result(doc, out)


def _kind(run_id: str, store: Path) -> str:
    """Whether a stored run is a training run ("train") or not ("inference")."""
    record = api.show_run(run_id, store)
    return "train" if (record.get("settings") or {}).get("kind") == "train" else "inference"


def report_cmd(
    run_id: RunIdArg,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="the file to write (default report-RUN_ID.html/.md)"),
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="html (self-contained page) or md (PR summary)")
    ] = "html",
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Write a stored run's report: one self-contained HTML file, or Markdown."""
    from bakeoff.report import writer

    if fmt not in writer.FORMATS:
        raise UserError(f"--format: expected html or md, got {fmt!r}")
    # Resolve a prefix to the full id first, so the default name is the real run id.
    full_id = str(api.show_run(run_id, store)["run_id"])
    output = output or Path(f"report-{full_id}.{fmt}")
    check_writable(output, "--output")
    path = writer.write(full_id, store, output, fmt)
    out.print(str(path), highlight=False, soft_wrap=True)


def compare_cmd(
    run_a: Annotated[str, typer.Argument(help="the earlier run (baseline)")],
    run_b: Annotated[str, typer.Argument(help="the later run")],
    fail_on_regression: Annotated[
        float | None,
        typer.Option(
            help="exit 1 if a candidate is slower by more than PCT percent, its CI excluding it"
        ),
    ] = None,
    margin: Annotated[
        float | None,
        typer.Option(
            help="equivalence margin for 'same' (default 0.05, or run A's margin if larger: "
            "two runs differ by a few percent from process to process)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the comparison as JSON")] = False,
    store: StoreOpt = DEFAULT_STORE,
    store_b: Annotated[
        Path | None,
        typer.Option(help="the store run B is in, when not the same as run A's (--store)"),
    ] = None,
) -> None:
    """Per candidate, B/A of the objective with its CI: faster, slower or same."""
    from bakeoff import compare
    from bakeoff.report.compare import print_comparison

    if fail_on_regression is not None and not 0 < fail_on_regression < 100:
        raise UserError(f"--fail-on-regression: a percentage in (0, 100), got {fail_on_regression}")
    kinds = (_kind(run_a, store), _kind(run_b, store_b or store))
    if kinds[0] != kinds[1]:
        raise UserError(
            f"run {run_a} is a {kinds[0]} run and {run_b} a {kinds[1]} run: compare two of a kind"
        )
    cmp = compare.compare(run_a, run_b, store, margin, store_b)
    regressions = cmp.regressions(fail_on_regression) if fail_on_regression is not None else []
    if as_json:
        payload = cmp.to_dict()
        if fail_on_regression is not None:
            payload["regressions"] = [r.candidate for r in regressions]
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        print_comparison(cmp, out)
        if fail_on_regression is not None:
            if regressions:
                for r in regressions:
                    err.print(
                        f"[red]regression:[/] {r.candidate} is {r.slower_by_pct:.1f}% slower "
                        f"(B/A {r.ratio:.3f}, {cmp.level:.1%} CI {r.ratio_lo:.3f}-"
                        f"{r.ratio_hi:.3f}), beyond {fail_on_regression:g}%",
                        highlight=False,
                    )
            else:
                out.print(f"no candidate is slower by more than {fail_on_regression:g}%")
    if regressions:
        raise typer.Exit(1)
