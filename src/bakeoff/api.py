"""The library face of bakeoff: what the CLI and the tests call.

`run` and `resume` are the inference bake-off (`bakeoff.inference.pipeline`,
on the trial engine in `bakeoff.trials`); `train` and `resume_training` the
training bake-off (`bakeoff.training.pipeline`, on the same engine); `load_generation`
and `run_generation` the generative bake-off (`bakeoff.generation.pipeline`, on the same
engine); `advise` the advice; `list_runs` and `show_run` read the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bakeoff import advise as advising
from bakeoff.errors import UserError
from bakeoff.generation.options import GenerateOptions
from bakeoff.generation.pipeline import GenerateResult, run_generation
from bakeoff.inference.document import SCHEMA_VERSION, write_json
from bakeoff.inference.options import SCENARIOS, RunOptions
from bakeoff.inference.pipeline import RunResult, plan_shares, run
from bakeoff.loader import load_generation, workload_ref
from bakeoff.paths import DEFAULT_STORE
from bakeoff.report import Reporter
from bakeoff.store import Store
from bakeoff.training.options import (
    NodeCluster,
    TrainOptions,
    TrainResult,
    check_train_request,
)
from bakeoff.training.pipeline import train
from bakeoff.training.progress import check_resume_start

__all__ = [
    "SCENARIOS",
    "SCHEMA_VERSION",
    "GenerateOptions",
    "GenerateResult",
    "NodeCluster",
    "RunOptions",
    "RunResult",
    "TrainOptions",
    "TrainResult",
    "advise",
    "check_train_request",
    "list_runs",
    "load_generation",
    "plan_shares",
    "resume",
    "resume_generation",
    "resume_training",
    "run",
    "run_generation",
    "show_run",
    "train",
    "training_to_resume",
    "workload_ref",
    "write_json",
]


def resume(
    run_id: str,
    store: str | Path = DEFAULT_STORE,
    reporter: Reporter | None = None,
    json_path: str | Path | None = None,
) -> RunResult:
    """Finish an interrupted or killed run without repeating completed trials."""
    if not Path(store).exists():
        raise UserError(f"no store at {store} (pass --store)")
    with Store(store) as s:
        record = s.run(run_id)
    if record["status"] == "done":
        raise UserError(f"run {record['run_id']} already finished; see `bakeoff show`")
    st = record["settings"]
    if st.get("kind") == "generate":
        raise UserError(
            f"run {record['run_id']} is a text-generation run: `bakeoff run --resume "
            f"{record['run_id']}` finishes it (api.resume_generation)"
        )
    if st.get("kind") == "train":
        raise UserError(
            f"run {record['run_id']} is a training run: `bakeoff train --resume "
            f"{record['run_id']}` finishes it"
        )
    if "workload_ref" not in st:
        raise UserError(f"run {record['run_id']} was stored without what is needed to resume it")
    opts = RunOptions.from_settings(st, store=store, json_path=json_path)
    return run(st["workload_ref"], opts, reporter, resume_record=record)


def resume_generation(
    run_id: str, store: str | Path = DEFAULT_STORE, say: Any = lambda text: None
) -> GenerateResult:
    """Finish an interrupted or killed text-generation run (`generation.resume` says
    what is kept and what is done again)."""
    record = show_run(run_id, store)
    st = record["settings"]
    if st.get("kind") != "generate":
        raise UserError(f"run {record['run_id']} is not a text-generation run")
    if record["status"] == "done":
        raise UserError(f"run {record['run_id']} already finished; see `bakeoff show`")
    if "options" not in st:
        raise UserError(
            f"run {record['run_id']} was stored before generative runs could resume: run it again"
        )
    workload = load_generation(st["workload_ref"], say)
    if workload is None:
        raise UserError(f"{st['workload_ref']}: no longer a text-generation workload")
    opts = GenerateOptions.from_settings(st, store)
    return run_generation(workload, opts, say, resume_record=record)


def training_to_resume(
    run_id: str, store: str | Path = DEFAULT_STORE, cluster_words: str | None = None
) -> dict[str, Any]:
    """The stored training run `run_id` (or a unique prefix of it), refused with why
    when its record alone says it cannot resume: the command checks this before it
    starts a cluster for the resume."""
    if not Path(store).exists():
        raise UserError(f"no store at {store} (pass --store)")
    with Store(store) as s:
        record = s.run(run_id)
    st = record["settings"]
    if st.get("kind") != "train":
        raise UserError(
            f"run {record['run_id']} is an inference run: `bakeoff run --resume "
            f"{record['run_id']}` finishes it"
        )
    if "recipe_digest" not in st:
        raise UserError(f"run {record['run_id']} was stored without what is needed to resume it")
    check_resume_start(record, cluster_words)
    return record


def resume_training(
    run_id: str,
    store: str | Path = DEFAULT_STORE,
    say: Any = lambda text: None,
    cluster: NodeCluster | None = None,
) -> TrainResult:
    """Finish an interrupted or killed training run: the timed rounds (once they
    had finished) and every seed trained to its end are not redone. A run that
    trained across a cluster's nodes goes on with `cluster` (as many nodes)."""
    record = training_to_resume(run_id, store, None if cluster is None else cluster.words)
    st = record["settings"]
    tb = st.get("tensorboard")
    opts = TrainOptions(
        stacks=tuple(st["stacks"]) if st.get("stacks_given") else None,
        seeds=st["seeds"],
        quick=st["quick"],
        store=Path(store),
        threads=st["threads"],
        trial_timeout_s=st["trial_timeout_s"],
        budget_s=st["budget_s"],
        tensorboard=None if tb is None else Path(tb),
        cluster=cluster,
    )
    return train(st["recipe_path"], opts, say, resume_record=record)


def advise(
    workload_ref: str | None,
    target: str | None = None,
    goal: str | None = None,
    train: bool = False,
    baseline_ms: float | None = None,
) -> advising.AdviceReport:
    """Candidate stacks for a workload with reasons, and the ones that are out, with why;
    from the spec and the model files alone (no data loaded, nothing run)."""
    return advising.advise(workload_ref, target, goal, train, baseline_ms)


def list_runs(store: str | Path = DEFAULT_STORE, limit: int = 50) -> list[dict[str, Any]]:
    if not Path(store).exists():
        return []
    with Store(store) as s:
        return s.runs(limit)


def show_run(run_id: str, store: str | Path = DEFAULT_STORE) -> dict[str, Any]:
    if not Path(store).exists():
        raise UserError(f"no store at {store} (run `bakeoff run` first, or pass --store)")
    with Store(store) as s:
        return s.run(run_id)
