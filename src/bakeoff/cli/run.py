"""`bakeoff run`: build, check and measure the candidates, or finish a run (--resume)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

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
SloOpt = Annotated[
    str | None,
    typer.Option(
        help="text generation, --scenario server: the target, ttft_p99_ms=MS,tpot_p99_ms=MS "
        "(default: 4x the reference's p99 TTFT and 2x its p99 TPOT one request at a time)"
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
    if api.show_run(run_id, store)["settings"].get("kind") == "generate":
        if mlflow is not None:
            raise UserError("--mlflow: not for a text-generation run")
        from bakeoff.cli import generation  # rich tables of its own, loaded when needed

        return generation.resume(run_id, store, json_path)
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


def _check_run_flags(
    json_path: Path | None,
    cluster: str | None,
    cluster_tmp: Path | None,
    per_node_type: bool,
    split: bool,
    cost_file: Path | None,
) -> None:
    """Flags that are wrong before anything runs: paths the results could not be
    written to are said now, rather than once the run is done."""
    if json_path is not None:
        check_writable(json_path, "--json")
    if cluster_tmp is not None:
        check_writable(cluster_tmp, "--cluster-tmp", folder=True)
    if (per_node_type or split or cost_file or cluster_tmp) and cluster is None:
        raise UserError("--per-node-type, --split, --cost-file and --cluster-tmp go with --cluster")


def _run_generative(generative: Any, inference_only: dict[str, bool], f: RunFlags) -> int:
    """A text-generation workload's bake-off (its exit code), once no flag that
    belongs to the inference bake-off only (`inference_only`: given or not) was given."""
    from bakeoff.cli import generation

    generation.refuse_inference_flags(inference_only)
    gen_opts = api.GenerateOptions(
        runtimes=tuple(_csv(f.runtimes) or ()) or None,
        precisions=tuple(_csv(f.precisions) or ()) or None,
        quick=f.quick,
        store=f.store,
        threads=f.threads,
        trial_timeout_s=f.trial_timeout,
        budget_s=f.budget,
        **generation.concurrency_option(f.concurrency),
        **generation.scenario_options(f.scenario, f.slo),
    )
    return generation.run(generative, gen_opts, f.json_path)


@dataclass(frozen=True)
class RunFlags:
    """What `bakeoff run` was given, as typed values (one object for the helpers)."""

    workload: str | None
    data: Path | None
    runtimes: str | None
    precisions: str | None
    batch_sizes: str | None
    budget: float | None
    trial_timeout: float
    quick: bool
    json_path: Path | None
    threads: int | None
    margin: float | None
    ci_target: float | None
    scenario: str
    latency_bound_ms: float
    cold_starts: int
    worker_per_batch_size: bool
    target: str | None
    max_p50_ms: float | None
    max_p99_ms: float | None
    max_peak_memory_mb: float | None
    max_model_size_mb: float | None
    max_cold_start_s: float | None
    resume: str | None
    store: Path
    mlflow: str | None
    concurrency: str | None
    slo: str | None
    cluster: str | None
    cluster_tmp: Path | None
    per_node_type: bool
    cost_file: Path | None
    split: bool


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
    slo: SloOpt = None,
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
    raise typer.Exit(_run(RunFlags(**locals())))


def _run(f: RunFlags) -> int:
    """The run's exit code: a resume, a generative bake-off, one on a cluster, or the
    inference bake-off here."""
    mlflow_uri = tracking.start(f.mlflow)  # before measuring: a bad URI is said now
    on_cluster = f.cluster is not None or f.per_node_type or f.split
    _check_run_flags(f.json_path, f.cluster, f.cluster_tmp, f.per_node_type, f.split, f.cost_file)
    if on_cluster and (f.resume is not None or mlflow_uri is not None):
        raise UserError(
            "--cluster: a run on a cluster resumes with `bakeoff sweep --resume SWEEP_ID`, "
            "and is not logged to MLflow yet"
        )
    if f.resume is not None:
        return _resume(f.resume, f.workload, f.store, f.json_path, mlflow_uri)
    constraints = _constraints(
        max_p50_ms=f.max_p50_ms,
        max_p99_ms=f.max_p99_ms,
        max_peak_memory_mb=f.max_peak_memory_mb,
        max_model_size_mb=f.max_model_size_mb,
        max_cold_start_s=f.max_cold_start_s,
    )
    generative = api.load_generation(f.workload, lambda text: err.print(text))
    if generative is not None:
        inference_only = {
            "--batch-sizes": f.batch_sizes is not None,
            "--margin": f.margin is not None,
            "--ci-target": f.ci_target is not None,
            "--scenario": f.scenario not in ("latency", "server"),
            "--cold-starts": f.cold_starts != 1,
            "--worker-per-batch-size": f.worker_per_batch_size,
            "--target": f.target is not None,
            "--max-*": bool(constraints),
            "--mlflow": mlflow_uri is not None,
            "--cluster": f.cluster is not None,
            "--data": f.data is not None,
        }
        return _run_generative(generative, inference_only, f)
    if f.concurrency is not None or f.slo is not None:
        flag = "--concurrency" if f.concurrency is not None else "--slo"
        raise UserError(f"{flag}: for a text-generation workload only")
    opts = api.RunOptions(
        runtimes=_csv(f.runtimes),
        precisions=_csv(f.precisions),
        batch_sizes=_ints(f.batch_sizes, "--batch-sizes"),
        budget_s=f.budget,
        trial_timeout_s=f.trial_timeout,
        quick=f.quick,
        store=f.store,
        json_path=f.json_path,
        threads=f.threads,
        margin=f.margin,
        ci_target=f.ci_target,
        scenario=f.scenario,
        latency_bound_ms=f.latency_bound_ms,
        cold_starts=f.cold_starts,
        worker_per_batch_size=f.worker_per_batch_size,
        target=f.target,
        # absolute: a resume may run in another folder
        data=str(f.data.resolve()) if f.data is not None else None,
        constraints=constraints,
    )
    if on_cluster:
        from bakeoff.cli.cluster_run import run_on_cluster

        where = f.workload or "builtin:minilm"
        return run_on_cluster(
            where, opts, f.cluster, f.cluster_tmp, f.per_node_type, f.cost_file, f.split
        )
    return _measure(f.workload, opts, f.json_path, mlflow_uri)
