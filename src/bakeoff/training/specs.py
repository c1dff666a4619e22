"""What a training worker builds: a stack's `TrainSpec` on the run's recipe, on this
machine or one rank on each of a cluster's nodes, with the LoRA adapters where the
stack adds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bakeoff import stacks
from bakeoff.stacks.spec import TrainSpec
from bakeoff.training.candidate import TrainCandidate
from bakeoff.training.options import NodeCluster
from bakeoff.training.recipe import Recipe


def stack_spec(
    recipe: Recipe,
    stack: str,
    data: Path,
    init: Path,
    seed: int,
    threads: int,
    processes: int | None = None,
    cluster: NodeCluster | None = None,
) -> TrainSpec:
    """The stack's spec; with `cluster`, its `processes` ranks train one a node there."""
    return TrainSpec(
        stack=stack,
        factory=recipe.factory,
        init_path=str(init),
        data_path=str(data),
        seed=seed,
        batch_size=recipe.batch_size,
        lr=recipe.lr_of(stack),
        threads=threads,
        candidate_id=stack,
        optimizer=recipe.optimizer,
        factory_dir=recipe.factory_dir,
        processes=stacks.BY_NAME[stack].processes if processes is None else processes,
        schedule=recipe.schedule,
        warmup_steps=recipe.warmup_steps,
        total_steps=recipe.max_steps,
        cluster_address=cluster.address if cluster else "",
        cluster_tmp=cluster.tmp if cluster else "",
        **_lora_fields(recipe, stack),
    )


def candidate_spec(
    recipe: Recipe,
    c: TrainCandidate,
    data: Path,
    init: Path,
    seed: int,
    threads: int,
    cluster: NodeCluster | None,
) -> TrainSpec:
    """A candidate's spec: here, or one rank on each of its nodes."""
    on_nodes = cluster if c.nodes else None
    return stack_spec(recipe, c.stack, data, init, seed, threads, c.processes, on_nodes)


def _lora_fields(recipe: Recipe, stack: str) -> dict[str, Any]:
    """The LoRA stack's adapters, as the recipe names them; none for another stack."""
    if stack != "lora" or recipe.lora is None:
        return {}
    lora = recipe.lora
    return {
        "lora_targets": lora.targets,
        "lora_rank": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_train": lora.train,
    }
