"""`bakeoff train`: one training recipe on every training stack, measured."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from bakeoff.cli import tracking
from bakeoff.cli.options import DEFAULT_STORE, MlflowOpt, StoreOpt
from bakeoff.cli.output import err, out
from bakeoff.efficiency import percent
from bakeoff.report.fit import fitted

if TYPE_CHECKING:
    from bakeoff.api import TrainOptions, TrainResult


def train_cmd(
    recipe: Annotated[
        str | None,
        typer.Argument(help="builtin:digits-train, or a workload .toml with a [train] section"),
    ] = None,
    stacks: Annotated[
        str | None,
        typer.Option("--stacks", help="comma-separated stacks (default: every one)"),
    ] = None,
    seeds: Annotated[
        int | None,
        typer.Option("--seeds", help="seeds trained to the target (default 5; 3 with --quick)"),
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="fewer rounds, seeds and steps")] = False,
    budget: Annotated[
        float | None,
        typer.Option("--budget", help="seconds for the timed rounds (default 90; 30 with --quick)"),
    ] = None,
    tensorboard: Annotated[
        Path | None,
        typer.Option("--tensorboard", help="write TensorBoard runs per stack and seed here"),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the result document here")
    ] = None,
    store: StoreOpt = DEFAULT_STORE,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            help="finish an interrupted training run (RUN_ID) without redoing what it finished",
        ),
    ] = None,
    mlflow: MlflowOpt = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="train ddp across a Ray cluster's nodes, one rank a node (Ray Train's "
            "TorchTrainer): local:N (N simulated nodes here) or an address; needs the "
            "cluster extra",
        ),
    ] = None,
    cluster_tmp: Annotated[
        Path | None,
        typer.Option(help="with --cluster: Ray's temp and log files (default: beside the store)"),
    ] = None,
) -> None:
    """Train one recipe on every stack: steps/s with a CI from interleaved rounds,
    time to the target and the final metric over seeds, memory and checkpoints.

    --mlflow logs the finished run to MLflow: a parent run, a child run
    per stack with each seed's loss and validation curves by step.

    --cluster trains ddp with one rank on each node of a Ray cluster, with its
    scaling efficiency against itself on one node; the other stacks train here.
    A run started with --cluster resumes with it."""
    mlflow_uri = tracking.start(mlflow)  # before training: a bad URI is said now
    # and a path the results could not be written to, rather than once training is done
    _check_paths(json_path, tensorboard, cluster, cluster_tmp)
    say = _say_since(time.perf_counter())
    if resume is not None:
        started_with = {
            "RECIPE": recipe,
            "--stacks": stacks,
            "--seeds": seeds,
            "--quick": quick or None,
            "--budget": budget,
            "--tensorboard": tensorboard,
        }
        result = _resumed(resume, started_with, store, cluster, cluster_tmp, say)
    else:
        opts = _train_options(stacks, seeds, quick, store, budget, tensorboard)
        result = _started(recipe, opts, cluster, cluster_tmp, say)
    _report(result.document, json_path, mlflow_uri, store)
    raise typer.Exit(result.exit_code)


def _check_paths(
    json_path: Path | None, tensorboard: Path | None, cluster: str | None, cluster_tmp: Path | None
) -> None:
    """Refuse, before anything trains, a path the results could not be written to,
    and --cluster-tmp without --cluster."""
    from bakeoff.errors import UserError
    from bakeoff.paths import check_writable

    for path, flag, folder in (
        (json_path, "--json", False),
        (tensorboard, "--tensorboard", True),
        (cluster_tmp, "--cluster-tmp", True),
    ):
        if path is not None:
            check_writable(path, flag, folder)
    if cluster_tmp is not None and cluster is None:
        raise UserError("--cluster-tmp goes with --cluster")


def _say_since(started: float) -> Callable[[str], None]:
    """The run's progress to stderr, each line with the seconds since `started`."""

    def say(text: str) -> None:
        err.print(
            f"[dim][{time.perf_counter() - started:6.1f} s][/] {escape(text)}", highlight=False
        )

    return say


def _resumed(
    run_id: str,
    started_with: Mapping[str, object],
    store: Path,
    cluster: str | None,
    cluster_tmp: Path | None,
    say: Callable[[str], None],
) -> TrainResult:
    """`--resume RUN_ID`: the run goes on as it was started, so none of the flags
    (`started_with`: each one's value, None where not given) that start a run."""
    from bakeoff import api
    from bakeoff.errors import UserError

    given = [flag for flag, value in started_with.items() if value is not None]
    if given:
        raise UserError(f"--resume goes on as the run was started: give no {', '.join(given)}")
    if cluster is not None:  # what the run's record refuses, said before a cluster starts
        api.training_to_resume(run_id, store, cluster)
    with _nodes(cluster, cluster_tmp, store, say) as on_nodes:
        return api.resume_training(run_id, store, say, on_nodes)


def _train_options(
    stacks: str | None,
    seeds: int | None,
    quick: bool,
    store: Path,
    budget: float | None,
    tensorboard: Path | None,
) -> TrainOptions:
    """A new run's options from its flags (`--stacks` comma-separated)."""
    from bakeoff import api

    names = tuple(s.strip() for s in stacks.split(",") if s.strip()) if stacks else None
    return api.TrainOptions(
        stacks=names,
        seeds=seeds,
        quick=quick,
        store=store,
        budget_s=budget,
        tensorboard=tensorboard,
    )


def _started(
    recipe: str | None,
    opts: TrainOptions,
    cluster: str | None,
    cluster_tmp: Path | None,
    say: Callable[[str], None],
) -> TrainResult:
    """A new run of RECIPE, with --cluster on the cluster's nodes where a stack
    trains across nodes."""
    from bakeoff import api
    from bakeoff.errors import UserError

    if recipe is None:
        raise UserError(
            "give a RECIPE (builtin:digits-train, builtin:minilm-finetune or a .toml "
            "with [train]), or --resume RUN_ID"
        )
    if cluster is not None:  # what the run would refuse, said before a cluster starts
        api.check_train_request(recipe, opts, across_nodes=True)
    with _nodes(cluster, cluster_tmp, opts.store, say) as on_nodes:
        return api.train(recipe, dataclasses.replace(opts, cluster=on_nodes), say)


def _report(
    doc: dict[str, Any], json_path: Path | None, mlflow_uri: str | None, store: Path
) -> None:
    """The finished run's table on the terminal, then its document to --json and to
    MLflow where they were asked for."""
    from bakeoff import api

    print_training(doc)
    if json_path is not None:
        api.write_json(doc, json_path)
        err.print(f"wrote {json_path}")
    if mlflow_uri is not None:
        tracking.log(mlflow_uri, doc, store)


@contextlib.contextmanager
def _nodes(
    words: str | None, tmp: Path | None, store: Path, say: Callable[[str], None]
) -> Iterator[Any]:
    """The cluster `--cluster` names, up (simulated nodes started) for the length of
    the block, as the training run uses it; None without --cluster."""
    if words is None:
        yield None
        return
    from bakeoff import api
    from bakeoff.distributed.session import connect, parse_cluster, short_tmp

    spec = parse_cluster(words)
    assert spec is not None  # words is given
    folder = tmp.resolve() if tmp is not None else short_tmp(store.resolve().parent / "ray")
    say(f"connecting to the Ray cluster {spec.words()} (Ray's files in {folder})")
    with connect(spec, folder) as session:
        types = sorted({n.node_type for n in session.nodes})
        say(f"{len(session.nodes)} bakeoff node(s) of type {', '.join(types)}")
        yield api.NodeCluster(session.address, len(session.nodes), spec.words(), str(folder))


def _ci(figure: dict[str, Any] | None, digits: int = 0) -> str:
    if not figure:
        return "-"
    lo, hi = figure["ci95"]
    return f"{figure['value']:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def print_training(doc: dict[str, Any]) -> None:
    from bakeoff.report.training import verdict_words

    wl = doc["workload"]
    table = Table(title=f"bakeoff {doc['run_id']} - {wl['name']}")
    for col in (
        "stack",
        "status",
        "samples/s [95% CI]",
        f"time to {wl['target']['metric']} {wl['target']['value']:g}",
        f"final {wl['target']['metric']}",
        "data wait",
        "peak MiB",
        "GFLOP/s (of peak)",
        "compile s",
        "checkpoint",
    ):
        table.add_column(col, justify="left" if col in ("stack", "status") else "right")
    for c in doc["candidates"]:
        ttt = c["time_to_target_s"]
        final = c["final_metric"]
        ck = c["checkpoint"]
        table.add_row(
            c["id"],
            c["status"],
            _ci(c["samples_per_s"]),
            "-"
            if not ttt
            else f"{ttt['score']:.2f} s ({ttt['method']}, spread {ttt['spread']:.2f})",
            "-" if not final else f"{final['mean']:.4f} ± {final['spread'] / 2:.4f}",
            "-" if c["data_wait_share"] is None else f"{c['data_wait_share']:.1%}",
            _peak_words(c["peak_rss_mb"]),
            _efficiency_words(c.get("efficiency")),
            "-" if c["compile_s"] is None else f"{c['compile_s']:.1f}",
            "-"
            if not ck
            else f"save {ck['save_s'] * 1e3:.0f} ms, load {ck['load_s'] * 1e3:.0f} ms, "
            f"{ck['size_mb']:.1f} MiB, reload "
            + ("identical" if ck["reload_identical"] else "DIFFERS"),
        )
    out.print(fitted(table, out.width))
    for c in doc["candidates"]:
        words = _fine_tuning_words(c)
        if words:
            out.print(f"  {c['id']}: {words}", highlight=False)
    for c in doc["candidates"]:
        if c.get("scaling"):
            out.print(f"  {c['id']}: {_scaling_words(c)}", highlight=False)
    for c in doc["candidates"]:
        if c["reason"]:
            out.print(f"  {c['id']}: {c['status']} - {escape(c['reason'])}", highlight=False)
    out.print("\nVerdict")
    for v in doc["verdicts"]:
        out.print(f"  {v['objective']}: {escape(verdict_words(v))}", highlight=False)


def _fine_tuning_words(c: dict[str, Any]) -> str:
    """Text and fine-tuning recipes: the parameters trained and the tokens/s."""
    words = []
    total = c["settings"].get("model_parameters")
    trained = c.get("trainable_parameters")
    if c.get("tokens_per_s") is None and (not total or trained == total):
        return ""
    if trained and total:
        words.append(f"{trained:,} of {total:,} parameters trained ({trained / total:.2%})")
    if c.get("tokens_per_s"):
        words.append(f"{_ci(c['tokens_per_s'])} tokens/s")
    return "; ".join(words)


def _efficiency_words(eff: dict[str, Any] | None) -> str:
    if not eff:
        return "-"
    return f"{eff['achieved_gflops']:.3g} ({percent(eff['fraction'])})"


def _peak_words(peak: dict[str, Any] | None) -> str:
    """The largest process's peak; with several ranks, how many and their sum too."""
    if not peak:
        return "-"
    if "ranks" not in peak:
        return f"{peak['max_rank']:.0f}"
    return f"{peak['max_rank']:.0f} per rank, {peak['sum']:.0f} in all"


def _scaling_words(c: dict[str, Any]) -> str:
    sc = c["scaling"]

    def share(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    if c.get("nodes"):
        words = (
            f"{c['nodes']} nodes x 1 rank x {c['threads_per_process']} thread(s) (Ray Train); "
            f"scaling efficiency {share(sc['efficiency_vs_one_node'])} against {c['nodes']}x "
            "itself in 1 rank on one node"
        )
    else:
        words = (
            f"{c['processes']} processes x {c['threads_per_process']} thread(s); scaling "
            f"efficiency {share(sc['efficiency_vs_one_process'])} against itself in 1 process "
            f"with the same threads, {share(sc['efficiency_vs_one_thread'])} against "
            f"{c['processes']}x its 1-thread rate"
        )
    if sc["communication_share"] is not None:
        words += f"; the all-reduce in flight {sc['communication_share']:.0%} of step time"
    if sc.get("reason"):
        words += f" ({escape(sc['reason'])})"
    return words
