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
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff import environment, stacks
from bakeoff.efficiency import PeakProbe, candidate_efficiency
from bakeoff.errors import UserError, did_you_mean
from bakeoff.judge import stats
from bakeoff.judge.verdict import Measured, decide
from bakeoff.paths import DEFAULT_STORE, RunFolder, hold_run_lock, resume_command
from bakeoff.store import Store, check_store
from bakeoff.training import tensorboard
from bakeoff.training.candidate import TrainCandidate
from bakeoff.training.progress import (
    Progress,
    check_resumable,
    check_resume_start,
    recipe_digest,
)
from bakeoff.training.recipe import Recipe, load_recipe, reference_of
from bakeoff.trials.engine import Checked, Engine, run_trials
from bakeoff.trials.entrant import Entrant
from bakeoff.trials.jobs import MeasuredJob, TargetJob, TrainJob, TrainSpec
from bakeoff.trials.launcher import LocalLauncher, WorkerFailed, worker_env
from bakeoff.trials.settings import TrialSettings

SCHEMA_VERSION = 1


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


@dataclass
class TrainResult:
    run_id: str
    document: dict[str, Any]

    @property
    def exit_code(self) -> int:
        ok = [c for c in self.document["candidates"] if c["status"] == "ok"]
        return 0 if ok else 1


class _Events:
    """The engine's progress to the terminal, its timed steps to the store."""

    def __init__(self, say: Callable[[str], None], store: Store, run_id: str) -> None:
        self.say, self.store, self.run_id = say, store, run_id

    def note(self, message: str, entrant: Entrant | None) -> None:
        self.say(message)

    def timed(
        self,
        entrant: Entrant,
        round_index: int,
        kind: str,
        latency_ns: list[int],
        block_ns: int | None,
        slot: int,
        extra: dict[str, list[int]] | None = None,  # no per-call figures here
    ) -> None:
        self.store.add_trial(self.run_id, entrant.id, round_index, kind, latency_ns, block_ns, slot)


class FirstLossGate:
    """A stack's first loss (the initial weights on the first batch, in eval mode,
    before any update) must be the reference's: same weights, same data, same loss."""

    def __init__(self, expected: float, tolerance: dict[str, float]) -> None:
        self.expected, self.tolerance = expected, tolerance

    def check(self, entrant: TrainCandidate, job: MeasuredJob, record: bool) -> Checked:
        first = entrant.worker.get("first_loss")
        if first is None or not math.isfinite(first):
            return Checked(False, f"its first loss is {first}, not a number")
        tol = self.tolerance.get(entrant.stack, 1e-4)
        drift = abs(first - self.expected) / max(abs(self.expected), 1e-12)
        words = f"first loss {first:.6f} (reference {self.expected:.6f})"
        if drift > tol:
            return Checked(False, f"{words}: off by {drift:.2%}, more than {tol:.2%}")
        return Checked(True, words)


# BF16 rounds the forward pass: its first loss is the reference's to about 1%.
_FIRST_LOSS_TOLERANCE = {"torch-bf16": 0.02}


def step_flops(model: Any, x: Any, y: Any) -> int | None:
    """The FLOPs (2 per multiply-add) of one training step's forward and backward on
    the global batch (x, y), counted by torch's own FLOP counter as the step runs:
    matrix products and convolutions, the GEMM work a GEMM peak is a limit for, as
    the inference count takes them from the ONNX graph; the backward exactly as
    autograd runs it (no input gradient for the first layer), not as a rule of
    thumb. The optimizer's elementwise update is not counted. None if it fails."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        counter = FlopCounterMode(display=False)
        with counter, torch.enable_grad():
            torch.nn.functional.cross_entropy(model(x), y).backward()
        model.zero_grad(set_to_none=True)
        total = int(counter.get_total_flops())
    except Exception:  # a figure beside the measurement never fails the run
        return None
    return total or None


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
                flops["lora"] = _lora_step_flops(model, recipe, x, y)
    return data, inits, first_loss, flops


def _lora_step_flops(model: Any, recipe: Recipe, x: Any, y: Any) -> int | None:
    """LoRA's step: the same forward, plus the adapters', and a backward that computes
    no gradient for the frozen weights, so fewer FLOPs than full fine-tuning's; counted
    on the model with the very adapters the stack adds."""
    import copy

    from bakeoff.stacks.torch_stacks import with_lora

    spec = _spec(recipe, "lora", Path(), Path(), 0, 1)
    try:
        wrapped = with_lora(copy.deepcopy(model), spec)
    except (ImportError, RuntimeError):  # the stack says why (unavailable, or its worker's)
        return None
    return step_flops(wrapped, x, y)


def _spec(
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
        **_lora(recipe, stack),
    )


def _candidate_spec(
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
    return _spec(recipe, c.stack, data, init, seed, threads, c.processes, on_nodes)


def _lora(recipe: Recipe, stack: str) -> dict[str, Any]:
    if stack != "lora" or recipe.lora is None:
        return {}
    lora = recipe.lora
    return {
        "lora_targets": lora.targets,
        "lora_rank": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_train": lora.train,
    }


def _settings(opts: TrainOptions, threads: int) -> TrialSettings:
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
    recipe, names, seeds = _asked(ref, opts)
    threads = opts.threads or environment.default_threads()
    env = {**environment.fingerprint(), "threads": threads, "seeds": seeds}
    if opts.cluster is not None:
        _check_cluster(opts.cluster, names, resume_record)
        env["cluster"] = {"spec": opts.cluster.words, "nodes": opts.cluster.nodes}
    if resume_record is None:
        run_id = time.strftime("train-%Y%m%d-%H%M%S-") + secrets.token_hex(2)
    else:
        run_id = resume_record["run_id"]
    folder = RunFolder.of(opts.store, run_id)
    Path(opts.store).parent.mkdir(parents=True, exist_ok=True)
    lock = hold_run_lock(folder, run_id)  # before the store is touched
    try:
        with Store(opts.store) as store:
            if resume_record is None:
                asked = _run_settings(ref, recipe, names, opts, seeds, threads)
                store.start_run(run_id, recipe.name, env, asked)
            else:
                check_resumable(resume_record, recipe, env)
                env = {
                    **resume_record["environment"],
                    "threads": threads,
                    "seeds": seeds,
                    **({"cluster": env["cluster"]} if "cluster" in env else {}),
                }
                store.mark_running(run_id)
            return _train(recipe, names, env, run_id, folder.path, opts, store, say, t_start)
    finally:
        lock.close()


def _asked(ref: str, opts: TrainOptions) -> tuple[Recipe, tuple[str, ...], int]:
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
    _, names, _ = _asked(ref, opts)
    if across_nodes:
        _check_across(names)


def _check_across(names: tuple[str, ...]) -> None:
    if not any(stacks.BY_NAME[n].across_nodes for n in names):
        able = ", ".join(s.name for s in stacks.STACKS if s.across_nodes)
        raise UserError(
            f"--cluster: only {able} trains across a cluster's nodes, and none of the "
            f"stacks asked ({', '.join(names)}) is one"
        )


def _check_cluster(
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


def _run_settings(
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


def _train(
    recipe: Recipe,
    names: tuple[str, ...],
    env: dict[str, Any],
    run_id: str,
    folder: Path,
    opts: TrainOptions,
    store: Store,
    say: Callable[[str], None],
    t_start: float,
) -> TrainResult:
    resume = resume_command(run_id, opts.store, "train")
    if opts.cluster is not None:  # its candidate across nodes goes on there
        resume += f" --cluster {shlex.quote(opts.cluster.words)}"
    # Said first: a killed run cannot say later which id to resume.
    say(
        f"run {run_id}: {recipe.name} on {', '.join(names)}, {env['seeds']} seed(s), "
        f"{env['threads']} thread(s); if it is interrupted, `{resume}`"
    )
    try:
        doc = _measure(recipe, names, env, run_id, folder, opts, store, say)
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted", None)
        say(f"interrupted: what finished is kept; `{resume}` finishes the run")
        raise
    except BaseException:
        store.finish_run(run_id, "failed", None)
        raise
    if opts.tensorboard is not None:
        written = tensorboard.write(doc, opts.tensorboard)
        say(f"TensorBoard: {len(written)} runs in {opts.tensorboard / run_id}")
    doc["timing_s"]["total"] = round(time.perf_counter() - t_start, 3)
    for c in doc["candidates"]:
        store.put_candidate(run_id, c)
    store.finish_run(run_id, "done", doc)
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
    settings = _settings(opts, threads)
    if progress.rounds is None:
        # The GEMM peak's process imports torch now, beside the inputs' writing and
        # the workers' starts; it times its GEMMs after the rounds, while nothing
        # else runs.
        precisions = {_precision(n) for n in names} | {"fp32"}
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
    _parity(candidates, recipe)
    # After the seeds: a stack that diverged or lost accuracy wins nothing.
    throughput = _throughput_verdict(candidates, recipe, settings)
    doc = _document(run_id, recipe, candidates, env, throughput, scaling, flops, peaks)
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
    jobs: dict[str, MeasuredJob] = {
        c.id: TrainJob(train=_candidate_spec(recipe, c, data, init, 0, threads, cluster))
        for c in pending
    }
    scaling = _scaling_entrants(pending, recipe, data, init, threads, jobs, cluster)
    gate = FirstLossGate(first_loss, _FIRST_LOSS_TOLERANCE)
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
            _Events(say, store, run_id),
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
            train=_candidate_spec(recipe, c, data, init, seed, threads, opts.cluster),
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


def _scaling_entrants(
    pending: list[TrainCandidate],
    recipe: Recipe,
    data: Path,
    init: Path,
    threads: int,
    jobs: dict[str, MeasuredJob],
    cluster: NodeCluster | None = None,
) -> list[TrainCandidate]:
    """For each multi-process stack, the same stack in 1 process with the run's
    threads and with 1 thread, timed in the same rounds (so drift hits them alike);
    for one across nodes, the same stack in 1 rank on one node."""
    out = []
    for c in pending:
        if c.nodes:
            label = f"{c.stack}@1-node"
            ref = TrainCandidate(
                c.stack, recipe.batch_size, label=label, scaling_of=c.stack, nodes=1
            )
            jobs[label] = TrainJob(train=_candidate_spec(recipe, ref, data, init, 0, 1, cluster))
            out.append(ref)
            continue
        if c.processes == 1:
            continue
        for label, n in ((f"{c.stack}@1-process", threads), (f"{c.stack}@1-thread", 1)):
            ref = TrainCandidate(c.stack, recipe.batch_size, label=label, scaling_of=c.stack)
            jobs[label] = TrainJob(train=_spec(recipe, c.stack, data, init, 0, n, processes=1))
            out.append(ref)
    return out


def _scaling(
    c: TrainCandidate, sps: dict[str, Any] | None, scaling: list[TrainCandidate], recipe: Recipe
) -> dict[str, Any] | None:
    """A multi-process stack against itself in 1 process: with the same total threads,
    and against `processes` times its 1-thread throughput; and the share of its step
    time the gradients' all-reduce was in flight."""
    if c.processes == 1:
        return None
    refs = {r.label.rpartition("@")[2]: r for r in scaling if r.scaling_of == c.stack}
    value = sps["value"] if sps else None

    def rate(r: TrainCandidate | None) -> float | None:
        found = _samples_per_s(r, recipe) if r is not None and r.status == "ok" else None
        return found["value"] if found else None

    if c.nodes:
        # Across nodes: against the same stack in 1 rank on one node, N times over.
        one_node = rate(refs.get("1-node"))
        why = [f"{r.id}: {r.status}: {r.reason}" for r in refs.values() if r.status != "ok"]
        return {
            "nodes": c.nodes,
            "efficiency_vs_one_node": value / (c.nodes * one_node) if value and one_node else None,
            "communication_share": c.worker.get("communication_share"),
            "one_node_samples_per_s": one_node,
            "reason": "; ".join(why),
        }

    one_process, one_thread = rate(refs.get("1-process")), rate(refs.get("1-thread"))
    why = [
        f"{r.id}: {r.status}: {r.reason}" for r in refs.values() if r.status != "ok" and r.reason
    ]
    if c.worker.get("communication_share") is None:
        why.append(
            "communication not timed: DDP's is, through its communication hook, and this "
            "stack has none"
        )
    return {
        "efficiency_vs_one_process": value / one_process if value and one_process else None,
        "efficiency_vs_one_thread": value / (c.processes * one_thread)
        if value and one_thread
        else None,
        "communication_share": c.worker.get("communication_share"),
        "one_process_samples_per_s": one_process,
        "one_thread_samples_per_s": one_thread,
        "reason": "; ".join(why),
    }


def _throughput_verdict(
    candidates: list[TrainCandidate], recipe: Recipe, s: TrialSettings
) -> dict[str, Any]:
    measured = [
        Measured(
            c.id, c.samples(), np.asarray(c.block_ns), recipe.batch_size, np.asarray(c.round_slots)
        )
        for c in candidates
        if c.status == "ok" and c.rounds_ns
    ]
    not_ok = {c.id: f"{c.status}: {c.reason}" for c in candidates if c.status != "ok"}
    v = decide(
        recipe.batch_size,
        "throughput",
        measured,
        recipe.reference,
        not_ok,
        margin=s.margin,
        min_rounds=s.min_rounds,
    ).to_dict()
    return {
        "objective": "samples_per_s",
        "winner": v["winner"],
        "standing": v["standing"],
        "baseline": v["baseline"],
        "ratio": v["speedup"],
        "ranking": v["ranking"],
        "ties": v["ties"],
        "reason": v["reason"],
        "headline": v["headline"],
    }


def _score(values: list[float], n_seeds: int) -> dict[str, Any] | None:
    """MLPerf's olympic mean over 5 or more seeds (drop the fastest and slowest; at
    most one seed that never reached the target, counted as the slowest), else the
    mean; None when too many seeds missed the target."""
    missed = n_seeds - len(values)
    if n_seeds >= 5:
        if missed > 1:
            return None
        ordered = sorted(values) + [math.inf] * missed
        kept = ordered[1:-1]
        return {"score": float(np.mean(kept)), "method": "olympic", "spread": float(np.ptp(kept))}
    if missed:
        return None
    return {"score": float(np.mean(values)), "method": "mean", "spread": float(np.ptp(values))}


def _parity(candidates: list[TrainCandidate], recipe: Recipe) -> None:
    """A stack whose mean final metric is more than the tolerance below the
    reference stack's is flagged, as the inference gate rejects a variant."""
    finals = {
        c.stack: [
            s["final_metric"]
            for s in c.trained_seeds()
            if not s["diverged"] and s["final_metric"] is not None
        ]
        for c in candidates
    }
    ref = finals.get(recipe.reference)
    if not ref:
        return
    ref_mean = float(np.mean(ref))
    for c in candidates:
        mine = finals.get(c.stack)
        if c.status == "ok" and mine and ref_mean - float(np.mean(mine)) > recipe.tolerance:
            c.set_status(
                "flagged",
                f"mean final {recipe.target_metric} {np.mean(mine):.4f} is more than "
                f"{recipe.tolerance:.0%} below the reference's {ref_mean:.4f}",
            )


def _samples_per_s(c: TrainCandidate, recipe: Recipe) -> dict[str, Any] | None:
    """Samples/s over the timed rounds, with the bootstrap CI: {"value", "ci95"}."""
    samples = c.samples()
    if not c.rounds_ns or not samples.size:
        return None
    calls = np.full(samples.shape[0], samples.shape[1])
    iv = stats.throughput(calls, np.asarray(c.block_ns), recipe.batch_size)
    return {"value": iv.value, "ci95": [iv.lo, iv.hi]}


def _tokens_per_s(sps: dict[str, Any] | None, recipe: Recipe) -> dict[str, Any] | None:
    """Text: samples/s times the real (not padding) tokens per example."""
    if sps is None or recipe.tokens_per_row is None:
        return None
    k = recipe.tokens_per_row
    return {"value": sps["value"] * k, "ci95": [v * k for v in sps["ci95"]], "per_sample": k}


def _precision(stack: str) -> str:
    """The precision whose GEMM peak a stack's FLOP/s are a share of."""
    return "bf16" if stack == "torch-bf16" else "fp32"


def _efficiency(
    c: TrainCandidate,
    sps: dict[str, Any] | None,
    flops: int | None,
    peaks: dict[str, Any],
    recipe: Recipe,
) -> dict[str, Any] | None:
    """Achieved FLOP/s at the measured samples/s, and its share of this machine's
    GEMM peak for the stack's precision (BF16 autocast: the BF16 peak where the
    CPU has native BF16, else FP32's), over all of the run's threads."""
    if not flops or not sps or c.nodes:  # this machine's peak is not the nodes'
        return None
    precision = _precision(c.stack)
    per_sample = max(1, round(flops / recipe.batch_size))
    found = candidate_efficiency(per_sample, sps["value"], peaks, precision)
    if found is None:
        return None
    return {"flops_per_step": flops, "precision": precision, **found}


def _candidate_document(
    c: TrainCandidate,
    recipe: Recipe,
    scaling: list[TrainCandidate],
    all_flops: dict[str, int | None],
    peaks: dict[str, Any],
) -> dict[str, Any]:
    sps = _samples_per_s(c, recipe)
    flops = all_flops.get(c.stack, all_flops.get("*"))
    trained = c.trained_seeds()
    seeds = [
        {
            "seed": s["seed"],
            "time_to_target_s": s["time_to_target_s"],
            "final_metric": s["final_metric"],
            "diverged": s["diverged"],
            "steps": s["steps"],
            "evals": s["evals"],
            "losses": s["losses"],
        }
        for s in trained
    ]
    reached = [s["time_to_target_s"] for s in trained if s["time_to_target_s"] is not None]
    finals = [
        s["final_metric"] for s in trained if s["final_metric"] is not None and not s["diverged"]
    ]
    waits = [s["data_wait_share"] for s in trained if s.get("data_wait_share") is not None]
    compiles = [s["compile_s"] for s in trained]
    return {
        "id": c.id,
        "stack": c.stack,
        "status": c.status,
        "reason": c.reason,
        "processes": c.processes,
        "nodes": c.nodes,  # 0: this machine; else one rank on each of that many nodes
        "threads_per_process": c.settings.get("threads"),
        "samples_per_s": sps,
        "tokens_per_s": _tokens_per_s(sps, recipe),
        "data_wait_share": float(np.mean(waits)) if waits else None,
        "peak_rss_mb": _peak(c),
        "scaling": _scaling(c, sps, scaling, recipe),
        "flops_per_step": flops,
        "efficiency": _efficiency(c, sps, flops, peaks, recipe),
        "seeds": seeds,
        # Seeds whose worker failed; the score counts them as seeds that missed the target.
        "failed_seeds": c.failed_seeds(),
        "time_to_target_s": _score(reached, len(c.seeds)) if c.seeds else None,
        "final_metric": {
            "mean": float(np.mean(finals)),
            "spread": float(np.ptp(finals)),
        }
        if finals
        else None,
        "checkpoint": None
        if c.checkpoint is None
        else {
            k: c.checkpoint[k]
            for k in ("save_s", "load_s", "size_mb", "reload_identical", "steps_compared", "format")
            if k in c.checkpoint
        },
        # where the stack compiles (its settings name the compiler)
        "compile_s": float(np.median(compiles))
        if compiles and "compile_backend" in c.settings
        else None,
        "trainable_parameters": c.settings.get("trainable_parameters"),
        "first_step_s": c.first_call_s,
        "settings": c.settings,
        "rounds": len(c.rounds_ns),
        "stopped": c.stopped,
        "validity": c.validity,
        "validity_reason": c.validity_reason,
    }


def _peak(c: TrainCandidate) -> dict[str, Any] | None:
    """The peak resident memory of the largest rank and of all ranks together (one
    process: both the same); each rank's figure where there are several."""
    ranks = c.worker.get("peak_rss_mb_ranks") or (
        [c.peak_rss_mb] if c.peak_rss_mb is not None else []
    )
    if not ranks:
        return None
    out: dict[str, Any] = {"max_rank": max(ranks), "sum": sum(ranks)}
    if len(ranks) > 1:
        out["ranks"] = ranks
    return out


def _document(
    run_id: str,
    recipe: Recipe,
    candidates: list[TrainCandidate],
    env: dict[str, Any],
    throughput: dict[str, Any],
    scaling: list[TrainCandidate],
    flops: dict[str, int | None],
    peaks: dict[str, Any],
) -> dict[str, Any]:
    docs = [_candidate_document(c, recipe, scaling, flops, peaks) for c in candidates]
    ref_final = next((d["final_metric"] for d in docs if d["stack"] == recipe.reference), None)
    for d in docs:
        if d["final_metric"] is not None and ref_final is not None:
            d["final_metric"]["reference"] = ref_final["mean"]
            d["final_metric"]["drop"] = ref_final["mean"] - d["final_metric"]["mean"]
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "kind": "train",
        "workload": {
            "name": recipe.name,
            "loss": recipe.loss,
            "optimizer": recipe.optimizer,
            "lr": recipe.lr,
            "lr_schedule": recipe.schedule,
            "warmup_steps": recipe.warmup_steps,
            "global_batch": recipe.batch_size,
            "max_steps": recipe.max_steps,
            "eval_every": recipe.eval_every,
            "target": {"metric": recipe.target_metric, "value": recipe.target},
            "train_rows": len(recipe.y_train),
            "validation_rows": len(recipe.y_val),
            "data": recipe.data,
            "tokens_per_row": recipe.tokens_per_row,
            "reference": recipe.reference,
            "tolerance": recipe.tolerance,
            "stack_lr": recipe.stack_lr,
            "lora": None if recipe.lora is None else dataclasses.asdict(recipe.lora),
        },
        "environment": env,
        "peaks": peaks,
        "candidates": docs,
        "verdicts": [
            throughput,
            _time_to_target_verdict(docs, recipe.reference),
            _memory_verdict(docs, recipe.reference),
        ],
    }


def _verdict(
    objective: str, ranking: list[dict[str, Any]], none_why: str, reference: str
) -> dict[str, Any]:
    """A verdict over the stacks' documents, best first, before its ratio and ties."""
    return {
        "objective": objective,
        "winner": ranking[0]["id"] if ranking else None,
        "baseline": reference,
        "ratio": None,
        "ranking": [d["id"] for d in ranking],
        "ties": [],
        "reason": "" if ranking else none_why,
    }


def _time_to_target_verdict(docs: list[dict[str, Any]], reference: str) -> dict[str, Any]:
    """Fastest to the target over seeds; a bootstrap over seeds gives the ratio's CI
    against the reference (seeds are few: the CI says how little they settle)."""
    scored = [d for d in docs if d["status"] == "ok" and d["time_to_target_s"]]
    ranking = sorted(scored, key=lambda d: d["time_to_target_s"]["score"])
    base = next((d for d in docs if d["stack"] == reference and d["time_to_target_s"]), None)
    out = _verdict(
        "time_to_target", ranking, "no stack reached the target in enough seeds", reference
    )
    if ranking and base is not None:
        win = ranking[0]
        a = np.array(
            [s["time_to_target_s"] for s in base["seeds"] if s["time_to_target_s"] is not None]
        )
        b = np.array(
            [s["time_to_target_s"] for s in win["seeds"] if s["time_to_target_s"] is not None]
        )
        ratio = base["time_to_target_s"]["score"] / win["time_to_target_s"]["score"]
        rng = np.random.default_rng(0)
        boot = [rng.choice(a, len(a)).mean() / rng.choice(b, len(b)).mean() for _ in range(2000)]
        lo, hi = (float(x) for x in np.percentile(boot, [2.5, 97.5]))
        out["ratio"] = {"value": ratio, "ci95": [lo, hi]}
        if win["id"] != base["id"] and lo <= 1.0:
            out["ties"] = [[win["id"], base["id"]]]
            out["reason"] = "the CI over seeds includes 1: not separated from the reference"
    return out


# Peak resident memory is one reading per stack, not a sample: stacks within this
# share of the lowest are tied with it.
MEMORY_TIE = 0.05


def _memory_verdict(docs: list[dict[str, Any]], reference: str) -> dict[str, Any]:
    """Lowest peak memory: all of a stack's processes together (its ranks' sum),
    from the throughput worker; within 5% of the lowest is a tie."""
    scored = [d for d in docs if d["status"] == "ok" and d["peak_rss_mb"]]
    ranking = sorted(scored, key=lambda d: d["peak_rss_mb"]["sum"])
    base = next((d for d in scored if d["stack"] == reference), None)
    out = _verdict("peak_memory", ranking, "no stack measured", reference)
    if not ranking:
        return out
    low = ranking[0]["peak_rss_mb"]["sum"]
    tied = [d["id"] for d in ranking if d["peak_rss_mb"]["sum"] <= low * (1 + MEMORY_TIE)]
    if len(tied) > 1:
        out["ties"] = [tied]
        out["reason"] = f"within {MEMORY_TIE:.0%} of the lowest peak: {', '.join(tied)}"
    if base is not None:
        # The reference's peak over the winner's (above 1: the winner needs less).
        out["ratio"] = {"value": base["peak_rss_mb"]["sum"] / low, "ci95": None}
    return out
