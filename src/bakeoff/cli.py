"""The `bakeoff` command: a thin Typer layer over bakeoff.api.

Exit codes: 0 a verdict named a winner (or the command did its job), 2 invalid
input, 130 Ctrl-C, 143 SIGTERM, 1 no winner or anything else. User errors print
a message, never a traceback.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bakeoff import api, environment
from bakeoff.errors import BakeoffError, UserError
from bakeoff.paths import DEFAULT_STORE

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Which deep learning stack should run this model, on this machine? Measured.",
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)
if not out.is_terminal:  # pipes and CI logs: wide enough for the results table
    out = Console(width=160)
if not err.is_terminal:
    err = Console(stderr=True, width=160)

StoreOpt = Annotated[Path, typer.Option("--store", help="SQLite store of runs")]


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise UserError("an empty list was given")
    return items


def _ints(value: str | None, flag: str) -> list[int] | None:
    items = _csv(value)
    if items is None:
        return None
    try:
        return [int(v) for v in items]
    except ValueError:
        raise UserError(f"{flag}: expected comma-separated integers, got {value!r}") from None


@app.command()
def run(
    workload: Annotated[
        str | None, typer.Argument(help="a workload .toml or builtin:NAME (default builtin:minilm)")
    ] = None,
    runtimes: Annotated[
        str | None, typer.Option(help="comma-separated, e.g. torch,onnxruntime")
    ] = None,
    precisions: Annotated[
        str | None,
        typer.Option(help="comma-separated, e.g. fp32,int8; or all (fp32,fp16,bf16,int8,int4)"),
    ] = None,
    batch_sizes: Annotated[str | None, typer.Option(help="comma-separated, e.g. 1,32")] = None,
    budget: Annotated[
        float | None, typer.Option(help="seconds of measuring (split over batch sizes)")
    ] = None,
    trial_timeout: Annotated[
        float, typer.Option(help="seconds a worker may take to answer before it is killed")
    ] = 300.0,
    quick: Annotated[bool, typer.Option("--quick", help="a short smoke run")] = False,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the result document")
    ] = None,
    threads: Annotated[
        int | None, typer.Option(help="threads per runtime (default: physical cores)")
    ] = None,
    margin: Annotated[
        float | None, typer.Option(help="equivalence margin for ties (default 0.02 = 2%)")
    ] = None,
    ci_target: Annotated[
        float | None,
        typer.Option(
            help="stop sampling once every candidate's CI is within +- this, relative "
            "(default 0.02); smaller keeps undecided close calls measuring, up to --budget"
        ),
    ] = None,
    scenario: Annotated[
        str,
        typer.Option(
            help="latency (batch latency and throughput), server (Poisson arrivals, "
            "highest rate within a p99 bound) or offline (all samples at once, "
            "concurrency swept per batch size)"
        ),
    ] = "latency",
    latency_bound_ms: Annotated[
        float, typer.Option(help="server scenario: the p99 latency bound in ms")
    ] = 100.0,
    cold_starts: Annotated[
        int, typer.Option(help="fresh processes per candidate for cold-start CIs")
    ] = 1,
    target: Annotated[
        str | None,
        typer.Option(
            help="deployment target whose advice picks the candidates when neither "
            "--runtimes nor the workload names them (server-cpu, server-gpu, edge-intel, "
            "mobile, browser, apple; default: detected)"
        ),
    ] = None,
    max_p50_ms: Annotated[
        float | None, typer.Option(help="constraint: the winner's median latency, ms")
    ] = None,
    max_p99_ms: Annotated[
        float | None, typer.Option(help="constraint: the winner's p99 latency, ms")
    ] = None,
    max_peak_memory_mb: Annotated[
        float | None, typer.Option(help="constraint: the winner's peak memory (RSS), MB")
    ] = None,
    max_model_size_mb: Annotated[
        float | None, typer.Option(help="constraint: the winner's model size on disk, MB")
    ] = None,
    max_cold_start_s: Annotated[
        float | None, typer.Option(help="constraint: the winner's load + first call, s")
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option("--resume", help="finish an interrupted run (RUN_ID) without redoing trials"),
    ] = None,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Build, check and measure every candidate stack, then name the winner.

    Each --max-* constraint replaces the workload's own limit of the same name:
    a candidate beyond one is measured and shown but cannot win.
    """
    from bakeoff.report.terminal import RichReporter, print_result

    if resume is not None:
        if workload is not None:
            raise UserError("--resume takes the workload from the stored run; give no WORKLOAD")
        with RichReporter(err) as reporter:
            resumed = api.resume(resume, store, reporter, json_path)
        print_result(resumed.document, out)
        raise typer.Exit(resumed.exit_code)

    opts = api.RunOptions(
        runtimes=_csv(runtimes),
        precisions=_csv(precisions),
        batch_sizes=_ints(batch_sizes, "--batch-sizes"),
        budget_s=budget,
        trial_timeout_s=trial_timeout,
        quick=quick,
        store=store,
        json_path=json_path,
        threads=threads,
        margin=margin,
        ci_target=ci_target,
        scenario=scenario,
        latency_bound_ms=latency_bound_ms,
        cold_starts=cold_starts,
        target=target,
        constraints={
            k: v
            for k, v in {
                "max_p50_ms": max_p50_ms,
                "max_p99_ms": max_p99_ms,
                "max_peak_memory_mb": max_peak_memory_mb,
                "max_model_size_mb": max_model_size_mb,
                "max_cold_start_s": max_cold_start_s,
            }.items()
            if v is not None
        }
        or None,
    )
    with RichReporter(err) as reporter:
        result = api.run(workload, opts, reporter)
    print_result(result.document, out)
    if json_path:
        out.print(f"[dim]wrote {json_path}[/]")
    raise typer.Exit(result.exit_code)


@app.command("ls")
def ls(store: StoreOpt = DEFAULT_STORE, limit: int = 20) -> None:
    """List stored runs, newest first."""
    runs = api.list_runs(store, limit)
    if not runs:
        out.print(f"no runs in {store}")
        return
    t = Table()
    for col in ("run id", "when", "workload", "status", "candidates", "winners"):
        t.add_column(col)
    for r in runs:
        when = datetime.datetime.fromtimestamp(r["created_at"]).strftime("%Y-%m-%d %H:%M")
        winners = ", ".join(f"b{bs}: {w}" for bs, w in r["winners"] if w) or "-"
        t.add_row(r["run_id"], when, r["workload"], r["status"], str(r["candidates"]), winners)
    out.print(t)


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="a run id (or a unique prefix)")],
    store: StoreOpt = DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="print the JSON document")] = False,
) -> None:
    """Show one stored run: the table and the verdicts, or its JSON."""
    from bakeoff.report.terminal import print_result

    record = api.show_run(run_id, store)
    doc = record["document"]
    if as_json:
        sys.stdout.write(json.dumps(doc or record, indent=2) + "\n")
        return
    if doc is None:
        rid, status = record["run_id"], record["status"]
        resume = f"`{api.resume_command(rid, store)}`"
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
    print_result(doc, out)


@app.command()
def env(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """This machine's fingerprint and every runtime's availability."""
    fp = environment.fingerprint()
    rts = environment.runtimes()
    if as_json:
        sys.stdout.write(json.dumps({"environment": fp, "runtimes": rts}, indent=2) + "\n")
        return
    cpu = fp["cpu"]
    out.print(
        f"[bold]bakeoff {fp['bakeoff_version']}[/] on Python {fp['python']}, {fp['platform']}"
    )
    out.print(
        f"CPU: {cpu['model']} ({cpu['physical_cores']} physical / {cpu['logical_cores']} logical "
        f"cores, flags: {', '.join(cpu['flags']) or 'none notable'})"
    )
    if "flags_simulated" in cpu:
        out.print(
            f"[yellow]CPU flags simulated[/] by BAKEOFF_CPU_FLAGS={cpu['flags_simulated']!r} "
            f"(the advice follows them; runtimes run on the real CPU: "
            f"{', '.join(cpu['detected_flags']) or 'none notable'})",
            highlight=False,
        )
    gpus = "; ".join(
        f"{g['name']} (driver {g.get('driver')}, {g.get('memory_mb', '?')} MiB)"
        for g in fp["gpu"] or []
    )
    out.print(f"memory: {fp['memory_gb']} GiB; GPU: {gpus or 'none (no CUDA device)'}")
    out.print(f"default threads per runtime: {environment.default_threads()}")
    t = Table(title="runtimes")
    for col in ("runtime", "available", "version", "why not / install"):
        t.add_column(col)
    for r in rts:
        why = "" if r["available"] else f"{r['reason']}; install: {r['install']}"
        # escape: install hints hold extras like jax[cuda13] that Rich would take for markup
        avail = "yes" if r["available"] else "[red]no[/]"
        name = escape(r["runtime"])
        if r.get("origin", "built-in") != "built-in":  # registered by another package
            name += f"\n[dim]{escape(r['origin'])}[/]"
        t.add_row(name, avail, escape(r["version"] or "-"), escape(why))
    out.print(t)


@app.command("export")
def export_cmd(
    run_id: Annotated[str, typer.Argument(help="a run id (or a unique prefix)")],
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
    files = ", ".join(f"{n} ({_mb(i['bytes'])})" for n, i in manifest["files"].items())
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


@app.command("advise")
def advise_cmd(
    workload: Annotated[
        str | None, typer.Argument(help="a workload .toml or builtin:NAME (default builtin:minilm)")
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            help="server-cpu, server-gpu, edge-intel, mobile, browser or apple "
            "(default: detected from this machine)"
        ),
    ] = None,
    goal: Annotated[str | None, typer.Option(help="latency or throughput")] = None,
    train: Annotated[bool, typer.Option("--train", help="also advise on training")] = False,
    baseline_ms: Annotated[
        float | None,
        typer.Option(help="the model's measured baseline latency in ms (batch 1), if known"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the advice as JSON")] = False,
) -> None:
    """Propose candidate stacks for a workload, each with its reason, and say why others are out."""
    report = api.advise(workload, target, goal, train, baseline_ms)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        return
    source = "stated" if report.target_source == "stated" else "detected"
    out.print(
        f"[bold]advice for {report.facts.workload}[/], target {report.target} ({source})"
        + (f", goal {report.goal}" if report.goal else ""),
        highlight=False,
    )
    out.print(f"[dim]{escape(report.facts.describe())}[/]", highlight=False)
    t = Table(title="proposed candidates")
    for col in ("runtime", "precision", "methods", "reason"):
        t.add_column(col)
    for p in report.proposed:
        t.add_row(p.runtime, p.precision, ", ".join(p.methods) or "-", escape(p.reason))
    out.print(t)
    if report.excluded:
        x = Table(title="excluded")
        x.add_column("what")
        x.add_column("why")
        for e in report.excluded:
            x.add_row(escape(e.what), escape(e.why))
        out.print(x)
    notes = [a for a in report.advice if not a.proposes]
    if notes:
        out.print("[bold]Notes[/]")
        for a in notes:
            mark = "[yellow]warning:[/] " if a.warning else ""
            out.print(f"  {mark}{escape(a.text)}", highlight=False)
            out.print(f"    [dim]{escape(a.reason)}[/]", highlight=False)


@app.command("report")
def report_cmd(
    run_id: Annotated[str, typer.Argument(help="a run id (or a unique prefix)")],
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
    from bakeoff.report import html, markdown

    if fmt not in ("html", "md"):
        raise UserError(f"--format: expected html or md, got {fmt!r}")
    writer = html.write if fmt == "html" else markdown.write
    # Resolve a prefix to the full id first, so the default name is the real run id.
    full_id = api.show_run(run_id, store)["run_id"]
    path = writer(full_id, store, output or Path(f"report-{full_id}.{fmt}"))
    out.print(str(path), highlight=False, soft_wrap=True)


@app.command("compare")
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

    if fail_on_regression is not None and not 0 < fail_on_regression < 100:
        raise UserError(f"--fail-on-regression: a percentage in (0, 100), got {fail_on_regression}")
    cmp = compare.compare(run_a, run_b, store, margin, store_b)
    regressions = cmp.regressions(fail_on_regression) if fail_on_regression is not None else []
    if as_json:
        payload = cmp.to_dict()
        if fail_on_regression is not None:
            payload["regressions"] = [r.candidate for r in regressions]
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        compare.print_comparison(cmp, out)
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


cache_app = typer.Typer(
    no_args_is_help=True, help="The variant cache: built variants shared between runs."
)
app.add_typer(cache_app, name="cache")


def _mb(n: float) -> str:
    """A size in bytes, in the unit that shows it best."""
    for unit in ("B", "KB", "MB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.2f} GB"


def _when(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


@cache_app.command("ls")
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
            _mb(e.bytes),
            f"{e.build_s:.1f} s",
            _when(e.created),
            _when(e.last_used),
        )
    out.print(t)
    total = sum(e.bytes for e in found)
    out.print(f"{len(found)} entries, {_mb(total)}", highlight=False)


@cache_app.command("clear")
def cache_clear(
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
) -> None:
    """Remove every cached build step (run folders keep their own files)."""
    from bakeoff import cache

    found = cache.entries()
    if not yes and not sys.stdin.isatty():
        raise UserError("cache clear asks first, and there is no terminal to ask; pass --yes")
    if not yes:
        size = _mb(sum(e.bytes for e in found))
        typer.confirm(
            f"remove {len(found)} entries ({size}) from {cache.variants_dir()}?", abort=True
        )
    done = cache.clear()
    shared = done.bytes - done.freed
    out.print(
        f"removed {done.entries} entries ({_mb(done.bytes)}) from {done.where}; "
        f"{_mb(done.freed)} freed"
        + (f", {_mb(shared)} still held by run folders that share the files" if shared > 0 else ""),
        highlight=False,
    )


# Set when SIGTERM arrived, so the exit code can say so (Typer turns every
# KeyboardInterrupt into 130).
_terminated: list[int] = []


def _stop_on_sigterm(signum: int, frame: object) -> None:
    """`kill`, a CI job's timeout or a service manager stops a run as Ctrl-C does:
    workers are closed, the run is marked interrupted and its resume command printed,
    instead of the process vanishing mid-round."""
    _terminated.append(signum)
    raise KeyboardInterrupt


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
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
        # escape: messages quote TOML ("[model] kind = ...") that Rich would eat as markup
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        sys.exit(exc.exit_code)
    except BakeoffError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
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


if __name__ == "__main__":
    main()
