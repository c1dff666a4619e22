"""A training run's options: what `bakeoff train` asks for (the stacks, the seeds,
the budget, a cluster), checked before anything runs, stored with the run so a
resume goes on alike, and turned into the trial engine's settings; and the run's
result."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff import stacks
from bakeoff.errors import UserError, did_you_mean
from bakeoff.lifecycle import FinishedRun
from bakeoff.paths import DEFAULT_STORE
from bakeoff.training import tensorboard
from bakeoff.training.progress import recipe_digest
from bakeoff.training.recipe import Recipe, load_recipe, reference_of
from bakeoff.trials.settings import TrialSettings


@dataclass(frozen=True)
class NodeCluster:
    """The Ray cluster whose nodes the stacks that train across nodes
    (`stacks.StackInfo.across_nodes`) use, one rank a node: its address (for the
    workers to join), its bakeoff nodes, how it was named (`--cluster`), and the
    folder for Ray Train's files. The other stacks train on this machine."""

    address: str
    nodes: int
    words: str
    tmp: str


@dataclass(frozen=True)
class TrainOptions:
    stacks: tuple[str, ...] | None = None
    seeds: int | None = None  # default: 3 with --quick, else 5
    quick: bool = False
    store: Path = DEFAULT_STORE  # the run's folder goes beside it, in runs/<run_id>
    threads: int | None = None  # default: the physical cores
    trial_timeout_s: float = 600.0
    budget_s: float | None = None  # the timed rounds' budget (default 90 s, --quick 30 s)
    tensorboard: Path | None = None  # event files per stack and seed go here
    cluster: NodeCluster | None = None  # ddp across its nodes (`bakeoff train --cluster`)


# a finished run of this kind: its id, document and exit code
TrainResult = FinishedRun


def checked_request(ref: str, opts: TrainOptions) -> tuple[Recipe, tuple[str, ...], int]:
    """The recipe, its stacks and its seed count as asked, refused with why where
    any of them (or the budget, or TensorBoard) is wrong."""
    recipe = load_recipe(ref, opts.quick)
    names = opts.stacks or recipe.stacks
    unknown = [n for n in names if n not in stacks.NAMES]
    if unknown:
        raise UserError(
            f"{'--stacks' if opts.stacks else 'train.stacks'}: no training stack "
            f"{', '.join(map(repr, unknown))}{did_you_mean(unknown[0], stacks.NAMES)} "
            f"(stacks: {', '.join(stacks.NAMES)})"
        )
    if opts.stacks:
        recipe = dataclasses.replace(recipe, reference=reference_of(names))
    seeds = opts.seeds if opts.seeds is not None else (3 if opts.quick else 5)
    if seeds < 1:
        raise UserError(f"--seeds: at least 1, not {seeds}")
    if opts.budget_s is not None and opts.budget_s <= 0:
        raise UserError(f"--budget: seconds above 0, not {opts.budget_s:g}")
    if opts.tensorboard is not None:
        tensorboard.check_available()
    return recipe, names, seeds


def check_train_request(ref: str, opts: TrainOptions, across_nodes: bool) -> None:
    """Refuse what `train` would refuse before training: the recipe, the stacks, the
    seeds or the budget, and with `across_nodes` stacks none of which trains across
    a cluster's nodes. The command checks this before it starts a cluster."""
    _, names, _ = checked_request(ref, opts)
    if across_nodes:
        _check_across(names)


def _check_across(names: tuple[str, ...]) -> None:
    if not any(stacks.BY_NAME[n].across_nodes for n in names):
        able = ", ".join(s.name for s in stacks.STACKS if s.across_nodes)
        raise UserError(
            f"--cluster: only {able} trains across a cluster's nodes, and none of the "
            f"stacks asked ({', '.join(names)}) is one"
        )


def check_cluster(
    cluster: NodeCluster, names: tuple[str, ...], resume_record: dict[str, Any] | None
) -> None:
    """A cluster is for a stack that trains across nodes, on 2 nodes or more; a
    resumed run goes on on as many nodes as it started on."""
    _check_across(names)
    if cluster.nodes < 2:
        raise UserError(
            f"--cluster {cluster.words}: training across nodes needs 2 bakeoff nodes or "
            f"more; the cluster has {cluster.nodes}"
        )
    if resume_record is None:
        return
    st = resume_record["settings"]  # it trained on a cluster (check_resume_start)
    if st.get("cluster_nodes") != cluster.nodes:
        raise UserError(
            f"run {resume_record['run_id']} trained across {st.get('cluster_nodes')} nodes; "
            f"--cluster {cluster.words} has {cluster.nodes}: its seeds would not be the "
            "rounds' candidate"
        )


def stored_settings(
    ref: str,
    recipe: Recipe,
    names: tuple[str, ...],
    opts: TrainOptions,
    seeds: int,
    threads: int,
) -> dict[str, Any]:
    """What the run was asked, stored with it: all a resume needs to go on alike."""
    return {
        "kind": "train",
        "recipe": ref,
        # A file's absolute path, so a resume from another folder finds it.
        "recipe_path": ref if ref.startswith("builtin:") else str(Path(ref).resolve()),
        "recipe_digest": recipe_digest(recipe),
        "stacks": list(names),
        "stacks_given": opts.stacks is not None,
        "seeds": seeds,
        "quick": opts.quick,
        "threads": threads,
        "budget_s": opts.budget_s,
        "trial_timeout_s": opts.trial_timeout_s,
        "tensorboard": None if opts.tensorboard is None else str(opts.tensorboard.resolve()),
        "cluster": opts.cluster.words if opts.cluster else None,
        "cluster_nodes": opts.cluster.nodes if opts.cluster else None,
    }


def trial_settings(opts: TrainOptions, threads: int) -> TrialSettings:
    """The trial engine's settings for the timed rounds: shorter with --quick."""
    return TrialSettings(
        threads=threads,
        trial_timeout_s=opts.trial_timeout_s,
        warmup_s=0.3 if opts.quick else 1.0,
        warmup_calls=5,
        slice_s=0.25,
        settle_s=0.0,
        min_rounds=5 if opts.quick else 8,
        max_rounds=15 if opts.quick else 40,
        budget_s=opts.budget_s if opts.budget_s is not None else (30.0 if opts.quick else 90.0),
        seed=0,
        objective="throughput",
        # A training worker's start (imports, torchrun and its ranks, Lightning) is
        # no figure of the verdict: they start as many at a time as there are cores,
        # nothing being timed then (each says it did not load alone).
        load_side_by_side=threads,
    )
