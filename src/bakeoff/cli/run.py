"""`bakeoff run`: build, check and measure the candidates, or finish a run (--resume)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from bakeoff import api
from bakeoff.cli import tracking
from bakeoff.cli.options import DEFAULT_STORE, DataOpt, MlflowOpt, StoreOpt, WorkloadArg
from bakeoff.cli.output import err, out
from bakeoff.errors import UserError
from bakeoff.paths import check_writable

# The options of `bakeoff run`, in the order --help lists them; each one's flag is
# its parameter's name in `run` (json_path: --json).
RuntimesOpt = Annotated[str | None, typer.Option(help="comma-separated, e.g. torch,onnxruntime")]
PrecisionsOpt = Annotated[
    str | None,
    typer.Option(help="comma-separated, e.g. fp32,int8; or all (fp32,fp16,bf16,int8,int4)"),
]
BatchSizesOpt = Annotated[str | None, typer.Option(help="comma-separated, e.g. 1,32")]
BudgetOpt = Annotated[
    float | None, typer.Option(help="seconds of measuring (split over batch sizes)")
]
TrialTimeoutOpt = Annotated[
    float, typer.Option(help="seconds a worker may take to answer before it is killed")
]
QuickOpt = Annotated[bool, typer.Option("--quick", help="a short smoke run")]
JsonPathOpt = Annotated[Path | None, typer.Option("--json", help="write the result document")]
ThreadsOpt = Annotated[
    int | None, typer.Option(help="threads per runtime (default: physical cores)")
]
MarginOpt = Annotated[
    float | None, typer.Option(help="equivalence margin for ties (default 0.02 = 2%)")
]
WorkerPerBatchSizeOpt = Annotated[
    bool,
    typer.Option(
        "--worker-per-batch-size",
        help="a fresh worker for each (variant, batch size), loaded one at a time and "
        "quality-checked at its own batch size: slower, and every cold start is "
        "measured alone (by default one worker per variant is timed at each batch "
        "size in turn, and loads run side by side)",
    ),
]
CiTargetOpt = Annotated[
    float | None,
    typer.Option(
        help="stop sampling once every candidate's CI is within +- this, relative "
        "(default 0.02); smaller keeps undecided close calls measuring, up to --budget"
    ),
]
ScenarioOpt = Annotated[
    str,
    typer.Option(
        help="latency (batch latency and throughput), server (Poisson arrivals, "
        "highest rate within a p99 bound) or offline (all samples at once, "
        "concurrency swept per batch size)"
    ),
]
LatencyBoundOpt = Annotated[
    float, typer.Option(help="server scenario: the p99 latency bound in ms")
]
ColdStartsOpt = Annotated[
    int, typer.Option(help="fresh processes per candidate for cold-start CIs")
]
TargetOpt = Annotated[
    str | None,
    typer.Option(
        help="deployment target whose advice picks the candidates when neither "
        "--runtimes nor the workload names them (server-cpu, server-gpu, edge-intel, "
        "mobile, browser, apple; default: detected)"
    ),
]
ConcurrencyOpt = Annotated[
    str | None,
    typer.Option(
        help="text generation: requests submitted together in the concurrency sweep, "
        "comma-separated (default 2,4,8; 0 skips the sweep)"
    ),
]
ClusterOpt = Annotated[
    str | None,
    typer.Option(
        help="run on a Ray cluster's node: local:N (simulated nodes here), "
        "local:TYPE=N,TYPE=M, or an address (needs the cluster extra)"
    ),
]
ClusterTmpOpt = Annotated[
    Path | None,
    typer.Option(help="with --cluster: Ray's temp and log files (default: beside the store)"),
]
PerNodeTypeOpt = Annotated[
    bool,
    typer.Option(
        "--per-node-type",
        help="with --cluster: the bake-off on one node of each machine type, and a "
        "cross-type table (with [cost] or --cost-file: USD per million inferences)",
    ),
]
SplitOpt = Annotated[
    bool,
    typer.Option(
        "--split",
        help="with --cluster: spread the candidates over identical nodes, each running "
        "the baseline too; each candidate judged by its ratio to the baseline on its node",
    ),
]
CostFileOpt = Annotated[
    Path | None,
    typer.Option(help='a TOML file: usd_per_hour = { "machine-type" = USD, ... }'),
]
MaxP50Opt = Annotated[
    float | None, typer.Option(help="constraint: the winner's median latency, ms")
]
MaxP99Opt = Annotated[float | None, typer.Option(help="constraint: the winner's p99 latency, ms")]
MaxPeakMemoryOpt = Annotated[
    float | None, typer.Option(help="constraint: the winner's peak memory (RSS), MiB")
]
MaxModelSizeOpt = Annotated[
    float | None, typer.Option(help="constraint: the winner's model size on disk, MiB")
]
MaxColdStartOpt = Annotated[
    float | None, typer.Option(help="constraint: the winner's load + first call, s")
]
ResumeOpt = Annotated[
    str | None,
    typer.Option("--resume", help="finish an interrupted run (RUN_ID) without redoing trials"),
]


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


def _constraints(**limits: float | None) -> dict[str, float] | None:
    """The --max-* flags that were given, by name; None when there are none."""
    return {k: v for k, v in limits.items() if v is not None} or None


def _resume(
    run_id: str, workload: str | None, store: Path, json_path: Path | None, mlflow: str | None
) -> int:
    """Finish a stored run (and log it to MLflow at `mlflow`); its exit code."""
    from bakeoff.report.terminal import RichReporter, print_result

    if workload is not None:
        raise UserError("--resume takes the workload from the stored run; give no WORKLOAD")
    with RichReporter(err) as reporter:
        resumed = api.resume(run_id, store, reporter, json_path)
    print_result(resumed.document, out)
    if mlflow is not None:
        tracking.log(mlflow, resumed.document, store)
    _next_steps(resumed.document, store, resumed.exit_code)
    return resumed.exit_code


def _measure(
    workload: str | None, opts: api.RunOptions, json_path: Path | None, mlflow: str | None
) -> int:
    """Run the bake-off, print its result (and log it to MLflow at `mlflow`); its
    exit code."""
    from bakeoff.report.terminal import RichReporter, print_result

    with RichReporter(err) as reporter:
        result = api.run(workload, opts, reporter)
    print_result(result.document, out)
    if json_path:
        out.print(f"[dim]wrote {json_path}[/]")
    if mlflow is not None:
        tracking.log(mlflow, result.document, opts.store)
    _next_steps(result.document, Path(opts.store), result.exit_code)
    return result.exit_code


def _next_steps(document: dict, store: Path, exit_code: int) -> None:
    """The exact commands that take a run with a winner further: its report, its
    files, and the winner served."""
    if exit_code != 0:
        return
    import importlib.util

    rid = document["run_id"]
    where = "" if store == DEFAULT_STORE else f" --store {store}"
    serve = f"bakeoff serve {rid}{where}"
    if importlib.util.find_spec("fastapi") is None:
        serve += "   (needs the serve extra: pip install 'bakeoff[serve]')"
    out.print("\n[bold]Next[/]", highlight=False)
    for command, what in (
        (f"bakeoff report {rid}{where} -o report-{rid}.html", "the HTML report"),
        (f"bakeoff export {rid}{where} -o {rid}-winner", "the winner's files, to deploy"),
        (serve, "the winner over HTTP (Open Inference Protocol v2)"),
    ):
        out.print(f"  {escape(command)}   [dim]# {what}[/]", highlight=False, soft_wrap=True)


def run(
    workload: WorkloadArg = None,
    data: DataOpt = None,
    runtimes: RuntimesOpt = None,
    precisions: PrecisionsOpt = None,
    batch_sizes: BatchSizesOpt = None,
    budget: BudgetOpt = None,
    trial_timeout: TrialTimeoutOpt = 300.0,
    quick: QuickOpt = False,
    json_path: JsonPathOpt = None,
    threads: ThreadsOpt = None,
    margin: MarginOpt = None,
    ci_target: CiTargetOpt = None,
    scenario: ScenarioOpt = "latency",
    latency_bound_ms: LatencyBoundOpt = 100.0,
    cold_starts: ColdStartsOpt = 1,
    worker_per_batch_size: WorkerPerBatchSizeOpt = False,
    target: TargetOpt = None,
    max_p50_ms: MaxP50Opt = None,
    max_p99_ms: MaxP99Opt = None,
    max_peak_memory_mb: MaxPeakMemoryOpt = None,
    max_model_size_mb: MaxModelSizeOpt = None,
    max_cold_start_s: MaxColdStartOpt = None,
    resume: ResumeOpt = None,
    store: StoreOpt = DEFAULT_STORE,
    mlflow: MlflowOpt = None,
    concurrency: ConcurrencyOpt = None,
    cluster: ClusterOpt = None,
    cluster_tmp: ClusterTmpOpt = None,
    per_node_type: PerNodeTypeOpt = False,
    cost_file: CostFileOpt = None,
    split: SplitOpt = False,
) -> None:
    """Build, check and measure every candidate stack, then name the winner.

    Each --max-* constraint replaces the workload's own limit of the same name:
    a candidate beyond one is measured and shown but cannot win.

    --mlflow logs the finished run to MLflow: a parent run, a child run
    per candidate.
    """
    mlflow_uri = tracking.start(mlflow)  # before measuring: a bad URI is said now
    # and a path the result could not be written to, rather than once the run is done
    if json_path is not None:
        check_writable(json_path, "--json")
    if cluster_tmp is not None:
        check_writable(cluster_tmp, "--cluster-tmp", folder=True)
    on_cluster = cluster is not None or per_node_type or split
    if (per_node_type or split or cost_file or cluster_tmp) and cluster is None:
        raise UserError("--per-node-type, --split, --cost-file and --cluster-tmp go with --cluster")
    if on_cluster and (resume is not None or mlflow_uri is not None):
        raise UserError(
            "--cluster: a run on a cluster resumes with `bakeoff sweep --resume SWEEP_ID`, "
            "and is not logged to MLflow yet"
        )
    if resume is not None:
        raise typer.Exit(_resume(resume, workload, store, json_path, mlflow_uri))
    generative = api.load_generation(workload, lambda text: err.print(text))
    if generative is not None:
        from bakeoff.cli import generation

        generation.refuse_inference_flags(
            {
                "--batch-sizes": batch_sizes is not None,
                "--margin": margin is not None,
                "--ci-target": ci_target is not None,
                "--scenario": scenario != "latency",
                "--cold-starts": cold_starts != 1,
                "--worker-per-batch-size": worker_per_batch_size,
                "--target": target is not None,
                "--max-*": any(
                    x is not None
                    for x in (
                        max_p50_ms,
                        max_p99_ms,
                        max_peak_memory_mb,
                        max_model_size_mb,
                        max_cold_start_s,
                    )
                ),
                "--mlflow": mlflow_uri is not None,
                "--cluster": cluster is not None,
                "--data": data is not None,
            }
        )
        gen_opts = api.GenerateOptions(
            runtimes=tuple(_csv(runtimes) or ()) or None,
            precisions=tuple(_csv(precisions) or ()) or None,
            quick=quick,
            store=store,
            threads=threads,
            trial_timeout_s=trial_timeout,
            budget_s=budget,
            **generation.concurrency_option(concurrency),
        )
        raise typer.Exit(generation.run(generative, gen_opts, json_path))
    if concurrency is not None:
        raise UserError("--concurrency: for a text-generation workload only")
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
        worker_per_batch_size=worker_per_batch_size,
        target=target,
        # absolute: a resume may run in another folder
        data=str(data.resolve()) if data is not None else None,
        constraints=_constraints(
            max_p50_ms=max_p50_ms,
            max_p99_ms=max_p99_ms,
            max_peak_memory_mb=max_peak_memory_mb,
            max_model_size_mb=max_model_size_mb,
            max_cold_start_s=max_cold_start_s,
        ),
    )
    if on_cluster:
        from bakeoff.cli.cluster_run import run_on_cluster

        code = run_on_cluster(
            workload or "builtin:minilm",
            opts,
            cluster,
            cluster_tmp,
            per_node_type,
            cost_file,
            split,
        )
        raise typer.Exit(code)
    raise typer.Exit(_measure(workload, opts, json_path, mlflow_uri))
