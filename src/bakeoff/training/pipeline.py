"""`bakeoff train`: the recipe on every stack asked for.

1. The data and each seed's initial weights are written once into the run's
   folder; every PyTorch stack loads the same file.
2. Throughput: each stack's worker (seed 0) is started through the trial engine.
   Its first loss, the initial weights on the first batch in eval mode before any
   update, must be the reference's (computed here in FP32): a stack that starts from other
   weights or other data is flagged before it is timed. Then steps are timed in
   randomized interleaved rounds across stacks, with racing and a bootstrap CI,
   exactly as inference calls are.
3. Each seed of each stack trains the whole recipe in a fresh worker, one at a
   time: time to the target (evaluation and the first step's compile apart),
   the final metric, divergence, the data-wait share; seed 0 also saves, reloads
   and checks that the next step's loss is unchanged bit for bit.
4. Verdicts: samples/s by the inference judge; time to target over seeds.

The steps' parts live beside this module: the options and what they refuse
(`options`), the workers' specs (`specs`), the first-loss gate (`gate`), the
scaling references (`scaling`), the throughput figures (`throughput`), the verdicts
and parity (`verdicts`) and the result document (`document`).
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff import environment, stacks
from bakeoff.efficiency import PeakProbe
from bakeoff.lifecycle import StoreEvents, lifecycle, new_run_id
from bakeoff.paths import resume_command
from bakeoff.store import Store, check_store
from bakeoff.training import tensorboard
from bakeoff.training.candidate import TrainCandidate
from bakeoff.training.document import document
from bakeoff.training.gate import FIRST_LOSS_TOLERANCE, FirstLossGate
from bakeoff.training.messages import TargetJob, TrainJob
from bakeoff.training.options import (
    NodeCluster,
    TrainOptions,
    TrainResult,
    check_cluster,
    checked_request,
    stored_settings,
    trial_settings,
)
from bakeoff.training.progress import Progress, check_resumable, check_resume_start
from bakeoff.training.recipe import Recipe
from bakeoff.training.scaling import scaling_entrants
from bakeoff.training.specs import candidate_spec
from bakeoff.training.throughput import gemm_precision, lora_step_flops, step_flops
from bakeoff.training.verdicts import check_parity, throughput_verdict
from bakeoff.trials.engine import Engine, run_trials
from bakeoff.trials.jobs import Job
from bakeoff.trials.launcher import LocalLauncher, WorkerFailed, worker_env
from bakeoff.trials.settings import TrialSettings


def _write_inputs(
    recipe: Recipe, folder: Path, seeds: int, names: tuple[str, ...]
) -> tuple[Path, list[Path], float, dict[str, int | None]]:
    """The data, each seed's initial weights, the reference first loss and one step's
    FLOPs (both on seed 0's model and first batch): every stack's ("*"), LoRA's its own."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "data.npz"
    np.savez(
        data, x_train=recipe.x_train, y_train=recipe.y_train, x_val=recipe.x_val, y_val=recipe.y_val
    )
    # a user's module found in the workload's folder, as the workers find it
    factory = stacks.model_factory(recipe.factory, recipe.factory_dir)
    inits = []
    first_loss: float = math.nan
    flops: dict[str, int | None] = {}
    for seed in range(seeds):
        torch.manual_seed(seed)
        model = factory()
        path = folder / f"init-seed{seed}.safetensors"
        save_file(model.state_dict(), str(path))
        inits.append(path)
        if seed == 0:
            idx = next(stacks.batches(len(recipe.y_train), recipe.batch_size, 0))
            x, y = torch.from_numpy(recipe.x_train[idx]), torch.from_numpy(recipe.y_train[idx])
            model.eval()  # as the stacks' check runs: dropout off, norms on running stats
            with torch.no_grad():
                first_loss = float(torch.nn.functional.cross_entropy(model(x), y))
            model.train()
            flops = {"*": step_flops(model, x, y)}
            if recipe.lora is not None and "lora" in names:
                flops["lora"] = lora_step_flops(model, recipe, x, y)
    return data, inits, first_loss, flops


def train(
    ref: str,
    opts: TrainOptions,
    say: Callable[[str], None] = lambda text: None,
    resume_record: dict[str, Any] | None = None,
) -> TrainResult:
    """Train the recipe on every stack and decide. With `resume_record` (a stored
    training run that did not finish, see `api.resume_training`), the run goes on
    under its own id: what it finished (`bakeoff.training.progress`) is not redone."""
    t_start = time.perf_counter()
    if resume_record is not None:
        check_resume_start(resume_record, None if opts.cluster is None else opts.cluster.words)
    check_store(opts.store)  # a store that cannot be is said before the recipe loads
    recipe, names, seeds = checked_request(ref, opts)
    threads = opts.threads or environment.default_threads()
    env = {**environment.fingerprint(), "threads": threads, "seeds": seeds}
    if opts.cluster is not None:
        check_cluster(opts.cluster, names, resume_record)
        env["cluster"] = {"spec": opts.cluster.words, "nodes": opts.cluster.nodes}
    run_id = new_run_id("train-") if resume_record is None else resume_record["run_id"]
    resume = resume_command(run_id, opts.store, "train")
    if opts.cluster is not None:  # its candidate across nodes goes on there
        resume += f" --cluster {shlex.quote(opts.cluster.words)}"

    def say_how_to_resume() -> None:
        say(f"interrupted: what finished is kept; `{resume}` finishes the run")

    with lifecycle(opts.store, run_id, resumable=True, on_interrupt=say_how_to_resume) as run:
        if resume_record is None:
            run.start(recipe.name, env, stored_settings(ref, recipe, names, opts, seeds, threads))
        else:
            check_resumable(resume_record, recipe, env)
            env = {
                **resume_record["environment"],
                "threads": threads,
                "seeds": seeds,
                **({"cluster": env["cluster"]} if "cluster" in env else {}),
            }
            run.resume()
        # Said first: a killed run cannot say later which id to resume.
        say(
            f"run {run_id}: {recipe.name} on {', '.join(names)}, {env['seeds']} seed(s), "
            f"{env['threads']} thread(s); if it is interrupted, `{resume}`"
        )
        doc = _measure(recipe, names, env, run_id, run.folder.path, opts, run.store, say)
        if opts.tensorboard is not None:
            written = tensorboard.write(doc, opts.tensorboard)
            say(f"TensorBoard: {len(written)} runs in {opts.tensorboard / run_id}")
        doc["timing_s"]["total"] = round(time.perf_counter() - t_start, 3)
        for c in doc["candidates"]:
            run.store.put_candidate(run_id, c)
        run.finish(doc)
        return TrainResult(run_id, doc)


def _measure(
    recipe: Recipe,
    names: tuple[str, ...],
    env: dict[str, Any],
    run_id: str,
    folder: Path,
    opts: TrainOptions,
    store: Store,
    say: Callable[[str], None],
) -> dict[str, Any]:
    threads = env["threads"]
    progress = Progress.of(folder)
    launcher = LocalLauncher(folder / "logs")
    settings = trial_settings(opts, threads)
    if progress.rounds is None:
        # The GEMM peak's process imports torch now, beside the inputs' writing and
        # the workers' starts; it times its GEMMs after the rounds, while nothing
        # else runs.
        precisions = {gemm_precision(n) for n in names} | {"fp32"}
        on_nodes = opts.cluster is not None and all(stacks.BY_NAME[n].across_nodes for n in names)
        probe = PeakProbe(
            threads,
            precisions,
            worker_env(threads),
            # no candidate's efficiency is a share of this machine's peak then
            skip_why="not measured: every stack trains on the cluster's nodes"
            if on_nodes
            else None,
        )
        try:
            data, inits, first_loss, flops = _write_inputs(recipe, folder, env["seeds"], names)
            candidates, scaling, peaks, rounds_s = _rounds(
                recipe,
                names,
                data,
                inits[0],
                first_loss,
                threads,
                run_id,
                launcher,
                settings,
                store,
                say,
                probe,
                opts.cluster,
            )
        finally:
            probe.close()
        progress.keep_rounds(candidates, scaling, peaks, rounds_s)
    else:
        data, inits, first_loss, flops = _write_inputs(recipe, folder, env["seeds"], names)
        candidates, scaling, peaks, rounds_s = progress.restored_rounds()
        done = sum(len(v) for v in progress.seeds.values())
        say(f"resuming: the timed rounds finished before, and {done} seed(s)")
    t_seeds = time.perf_counter()
    for c in candidates:
        if c.status in ("ok", "flagged"):
            _train_seeds(c, recipe, data, inits, threads, launcher, folder, opts, say, progress)
    seeds_s = time.perf_counter() - t_seeds
    check_parity(candidates, recipe)
    # After the seeds: a stack that diverged or lost accuracy wins nothing.
    throughput = throughput_verdict(candidates, recipe, settings)
    doc = document(run_id, recipe, candidates, env, throughput, scaling, flops, peaks)
    doc["timing_s"] = {"rounds": round(rounds_s, 3), "seeds": round(seeds_s, 3)}
    return doc


def _rounds(
    recipe: Recipe,
    names: tuple[str, ...],
    data: Path,
    init: Path,
    first_loss: float,
    threads: int,
    run_id: str,
    launcher: LocalLauncher,
    settings: TrialSettings,
    store: Store,
    say: Callable[[str], None],
    probe: PeakProbe,
    cluster: NodeCluster | None = None,
) -> tuple[list[TrainCandidate], list[TrainCandidate], Any, float]:
    """Every stack's steps timed in interleaved rounds (with the scaling references),
    then the GEMM peak: the candidates as the rounds left them."""
    # Steps a cut-short stage timed are not this stage's: it starts again whole.
    store.drop_trials(run_id)
    candidates = [candidate(n, recipe, cluster) for n in names]
    for c in candidates:
        why = why_unavailable(c, recipe, threads)
        if why:
            c.set_status("unavailable", why)
    pending = [c for c in candidates if c.status == "pending"]
    jobs: dict[str, Job] = {
        c.id: TrainJob(train=candidate_spec(recipe, c, data, init, 0, threads, cluster))
        for c in pending
    }
    scaling = scaling_entrants(pending, recipe, data, init, threads, jobs, cluster)
    gate = FirstLossGate(first_loss, FIRST_LOSS_TOLERANCE)
    say(
        f"measuring steps/s: {len(pending)} stacks in interleaved rounds"
        + (f" (and {len(scaling)} scaling references)" if scaling else "")
    )
    t_rounds = time.perf_counter()
    run_trials(
        pending + scaling,
        jobs,
        # The reference stack and the scaling references: the ratios are over them.
        Engine(
            gate,
            launcher,
            settings,
            StoreEvents(say, store, run_id),
            baselines=frozenset({recipe.reference, *(r.id for r in scaling)}),
        ),
    )
    rounds_s = time.perf_counter() - t_rounds
    if probe.kinds:
        say(f"measuring this machine's GEMM peak ({threads} thread(s))")
    peaks = probe.measure()
    for c in candidates:
        if c.status == "rejected":
            c.set_status("flagged", c.reason)
    return candidates, scaling, peaks, rounds_s


def _train_seeds(
    c: TrainCandidate,
    recipe: Recipe,
    data: Path,
    inits: list[Path],
    threads: int,
    launcher: LocalLauncher,
    folder: Path,
    opts: TrainOptions,
    say: Callable[[str], None],
    progress: Progress,
) -> None:
    kept = progress.seeds.get(c.stack, [])
    for seed, init in enumerate(inits):
        if seed < len(kept):  # trained to its end before the interruption
            c.seeds.append(kept[seed])
            c.checkpoint = kept[seed].get("checkpoint", c.checkpoint)
            continue
        job = TargetJob(
            train=candidate_spec(recipe, c, data, init, seed, threads, opts.cluster),
            max_steps=recipe.max_steps,
            eval_every=recipe.eval_every,
            target=recipe.target,
            checkpoint_path=str(folder / f"{c.stack}.ckpt") if seed == 0 else "",
        )
        try:
            found = launcher.run(job, f"{c.stack}-seed{seed}", opts.trial_timeout_s)
        except WorkerFailed as exc:
            # That seed's failure alone: the stack's other seeds still train, and it
            # is judged on them (a failed seed counts as one that missed the target).
            failed_seed = {"seed": seed, "failed": str(exc)}
            c.seeds.append(failed_seed)
            progress.keep_seed(c.stack, failed_seed)
            say(f"{c.stack} seed {seed}: failed: {exc}")
            continue
        result = {"seed": seed, **{k: v for k, v in found.items() if k != "ok"}}
        c.seeds.append(result)
        progress.keep_seed(c.stack, result)
        ttt = found["time_to_target_s"]
        say(
            f"{c.stack} seed {seed}: "
            + (
                "diverged"
                if found["diverged"]
                else f"final {recipe.target_metric} {found['final_metric']:.4f}"
            )
            + (f", target in {ttt:.2f} s" if ttt is not None else ", target not reached")
        )
        if "checkpoint" in found:
            c.checkpoint = found["checkpoint"]
    trained = c.trained_seeds()
    failures = [f"seed {f['seed']} failed: {f['reason']}" for f in c.failed_seeds()]
    if not trained:
        c.set_status("failed", "; ".join(failures))
    elif all(s["diverged"] for s in trained):
        c.set_status(
            "diverged", "; ".join(["the loss went NaN or infinite in every seed", *failures])
        )
    elif failures:
        c.set_status(
            c.status, f"{'; '.join(failures)} (judged on the other {len(trained)} seed(s))"
        )


def why_unavailable(c: TrainCandidate, recipe: Recipe, threads: int) -> str | None:
    """Why the stack cannot train this recipe here, before anything runs (None: it can)."""
    why = stacks.availability(c.stack, recipe.factory)
    if not why and recipe.batch_size % c.processes:
        why = (
            f"the global batch ({recipe.batch_size}) does not split evenly over its "
            f"{c.processes} processes"
        )
    elif not why and c.stack == "lora" and recipe.lora is None:
        why = (
            "the recipe names no LoRA adapters: [train] lora = { targets = [...] } "
            "(the modules that get them, e.g. a transformer's attention projections)"
        )
    elif not why and threads < c.processes and not c.nodes:
        why = f"needs {c.processes} threads, one per process; the run has {threads}"
    return why


def candidate(name: str, recipe: Recipe, cluster: NodeCluster | None) -> TrainCandidate:
    """The stack's candidate: on this machine, or, with a cluster, one rank on each of
    its nodes where the stack trains across nodes."""
    if cluster is not None and stacks.BY_NAME[name].across_nodes:
        return TrainCandidate(name, recipe.batch_size, processes=cluster.nodes, nodes=cluster.nodes)
    return TrainCandidate(name, recipe.batch_size, processes=stacks.BY_NAME[name].processes)
