"""What a training run has finished, kept in its folder as it finishes, so that an
interrupted or killed run resumes (`bakeoff train --resume RUN_ID`) without
redoing it.

Two kinds of work are kept:

- the timed rounds, as one stage: every stack's (and scaling reference's) worker
  held its model and optimizer state through them, so a stage cut short is timed
  again from its start (it is the short part: the rounds' budget); once finished,
  its candidates, the GEMM peak and its seconds are kept whole;
- each stack's seeds, one by one: a seed trained to its end is kept with its
  curve, evaluations and (seed 0) checkpoint check; a seed cut short is trained
  again from its initial weights (a time to the target cannot be stitched).

A resume refuses when what was finished was measured on something else: another
recipe (its data and every setting, by digest), other library versions, another
CPU or other threads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakeoff import environment
from bakeoff.errors import UserError
from bakeoff.training.candidate import TrainCandidate
from bakeoff.training.recipe import Recipe

FILE = "progress.json"


@dataclass
class Progress:
    path: Path
    rounds: dict[str, Any] | None = None  # candidates, scaling, peaks, rounds_s
    # By stack, each seed as it ended: trained to the recipe's end, or failed (why).
    seeds: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def of(cls, folder: Path) -> Progress:
        """The run's progress so far (nothing, for a new run)."""
        path = folder / FILE
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(
                f"{path}: cannot read what the run finished ({exc}); start a new run"
            ) from None
        return cls(path, data.get("rounds"), data.get("seeds", {}))

    def save(self) -> None:
        """Written whole to a file beside it, then moved over it: a kill leaves the
        old progress or the new, never half of one."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        part = self.path.with_suffix(".part")
        data = {"rounds": self.rounds, "seeds": self.seeds}
        part.write_text(json.dumps(data), encoding="utf-8")
        os.replace(part, self.path)

    def keep_rounds(
        self,
        candidates: list[TrainCandidate],
        scaling: list[TrainCandidate],
        peaks: Any,
        rounds_s: float,
    ) -> None:
        self.rounds = {
            "candidates": [dataclasses.asdict(c) for c in candidates],
            "scaling": [dataclasses.asdict(c) for c in scaling],
            "peaks": peaks,
            "rounds_s": rounds_s,
        }
        self.save()

    def restored_rounds(self) -> tuple[list[TrainCandidate], list[TrainCandidate], Any, float]:
        """The candidates and scaling references as the finished rounds left them."""
        assert self.rounds is not None
        r = self.rounds
        return (
            [TrainCandidate(**c) for c in r["candidates"]],
            [TrainCandidate(**c) for c in r["scaling"]],
            r["peaks"],
            float(r["rounds_s"]),
        )

    def keep_seed(self, stack: str, result: dict[str, Any]) -> None:
        self.seeds.setdefault(stack, []).append(result)
        self.save()


def recipe_digest(recipe: Recipe) -> str:
    """What the recipe trains and how, as one hash: its data and every setting."""
    h = hashlib.sha256()
    for name in ("x_train", "y_train", "x_val", "y_val"):
        array = getattr(recipe, name)
        h.update(f"{name}{array.dtype}{array.shape}".encode())
        h.update(array.tobytes())
    settings = {
        f.name: getattr(recipe, f.name)
        for f in dataclasses.fields(recipe)
        if f.name not in ("x_train", "y_train", "x_val", "y_val")
    }
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()


def check_resume_start(record: dict[str, Any], cluster_words: str | None) -> None:
    """Refuse what the run's record alone says cannot resume, before the recipe is
    loaded or a cluster is started for it: a finished run, or a run resumed elsewhere
    than it trained (across a cluster's nodes, `cluster_words`, or here alone)."""
    run_id = record["run_id"]
    if record.get("status") == "done":
        raise UserError(f"run {run_id} already finished; see `bakeoff show {run_id}`")
    trained_on = record["settings"].get("cluster")
    if cluster_words is None and trained_on:
        raise UserError(
            f"run {run_id} trained across the nodes of a Ray cluster: "
            f"resume it with --cluster {trained_on}"
        )
    if cluster_words is not None and not trained_on:
        raise UserError(f"run {run_id} trained on this machine alone: resume it without --cluster")


def check_resumable(record: dict[str, Any], recipe: Recipe, env: dict[str, Any]) -> None:
    """Refuse when the finished work was measured on something other than what a
    resume would measure the rest on."""
    run_id = record["run_id"]
    start_over = "; put it back as it was to resume, or start a new run"
    if record["settings"]["recipe_digest"] != recipe_digest(recipe):
        raise UserError(
            f"the recipe {record['settings']['recipe']} (its data or settings) changed since "
            f"run {run_id} started{start_over}"
        )
    environment.check_same_packages(record, env)
    cpu_then, cpu_now = _cpu(record["environment"]), _cpu(env)
    if cpu_then != cpu_now:
        raise UserError(
            f"run {run_id} started on another CPU ({cpu_then}; this one is {cpu_now}): "
            "its figures cannot be mixed with this machine's; start a new run here"
        )


def _cpu(env: dict[str, Any]) -> Any:
    cpu = env.get("cpu")
    return cpu.get("model") if isinstance(cpu, dict) else cpu
