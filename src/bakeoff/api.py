"""The library face of bakeoff: what the CLI and the tests call.

`run` and `resume` are the inference bake-off (`bakeoff.inference.pipeline`,
on the trial engine in `bakeoff.trials`); `train` the training bake-off
(`bakeoff.training.pipeline`, on the same engine); `advise` the advice;
`list_runs` and `show_run` read the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bakeoff import advise as advising
from bakeoff.errors import UserError
from bakeoff.inference.document import SCHEMA_VERSION, write_json
from bakeoff.inference.options import SCENARIOS, RunOptions
from bakeoff.inference.pipeline import RunResult, run
from bakeoff.paths import DEFAULT_STORE
from bakeoff.report import Reporter
from bakeoff.store import Store
from bakeoff.training.pipeline import TrainOptions, TrainResult, train

__all__ = [
    "SCENARIOS",
    "SCHEMA_VERSION",
    "RunOptions",
    "RunResult",
    "TrainOptions",
    "TrainResult",
    "advise",
    "list_runs",
    "resume",
    "run",
    "show_run",
    "train",
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
    if st.get("kind") == "train":
        raise UserError(f"run {record['run_id']} is a training run: it cannot be resumed yet")
    if "workload_ref" not in st:
        raise UserError(f"run {record['run_id']} was stored without what is needed to resume it")
    opts = RunOptions.from_settings(st, store=store, json_path=json_path)
    return run(st["workload_ref"], opts, reporter, resume_record=record)


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
