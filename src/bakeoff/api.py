"""The library face of bakeoff: what the CLI and the tests call.

Data flows one way: workload -> candidates -> built variants -> reference ->
measured trials -> verdicts -> document (store, JSON, terminal).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

import bakeoff
from bakeoff import advise as advising
from bakeoff import cache as variant_cache
from bakeoff import environment
from bakeoff.backends import Variant, reference_variant, runtime_names
from bakeoff.batching import CONST_PREFIX, Layout, layout_in
from bakeoff.candidates import (
    Candidate,
    candidate_document,
    enumerate_candidates,
    explicit_candidates,
)
from bakeoff.errors import BakeoffError, UserError
from bakeoff.judge.verdict import Measured, Verdict, constraint_violations, decide, objective_for
from bakeoff.loader import load_workload
from bakeoff.measure.jobs import BuildJob, JobBase, LoadSpec, ReferenceJob
from bakeoff.measure.process import WorkerFailed, run_job
from bakeoff.measure.scheduler import GroupContext, MeasureSettings, measure_group, set_validity
from bakeoff.measure.worker import ALT_SPLIT, alt_outputs_path
from bakeoff.paths import DEFAULT_STORE, RunFolder, resume_command
from bakeoff.report import NullReporter, Reporter
from bakeoff.store import Store
from bakeoff.workload import PRECISIONS, ConstraintsSpec, Workload, default_runtimes

SCENARIOS = ("latency", "server", "offline")

SCHEMA_VERSION = 1
# History of the result document:
#   1 (0.1.0): first version: workload, environment, candidates, verdicts, timing.
SPLIT_SEED = 0


@dataclass(frozen=True)
class RunOptions:
    runtimes: list[str] | None = None
    precisions: list[str] | None = None
    batch_sizes: list[int] | None = None
    budget_s: float | None = None
    trial_timeout_s: float = 300.0
    build_timeout_s: float = 900.0
    quick: bool = False
    store: str | Path = DEFAULT_STORE
    json_path: str | Path | None = None
    threads: int | None = None
    seed: int = 0
    margin: float | None = None  # overrides the workload's [search] margin
    ci_target: float | None = None  # overrides the workload's [search] ci_target
    fixed_seconds: float | None = None  # benchmark comparator: no rounds, no racing
    scenario: str = "latency"  # latency | server | offline
    latency_bound_ms: float = 100.0  # server scenario: the p99 bound
    cold_starts: int = 1  # fresh processes per candidate for cold start figures
    # The deployment target whose advice picks the candidates when nothing else
    # does (None: detected, see advise.default_target).
    target: str | None = None
    # Limits a winner must meet (max_p99_ms ...), each replacing the workload's own.
    constraints: dict[str, float] | None = None

    def to_settings(self) -> dict[str, Any]:
        """What a run's stored settings keep of its options: all a resume needs to
        run the same way again (see `_STORED`)."""
        return {key: getattr(self, name) for key, name in _STORED.items()}

    @classmethod
    def from_settings(
        cls,
        settings: dict[str, Any],
        store: str | Path = DEFAULT_STORE,
        json_path: str | Path | None = None,
    ) -> RunOptions:
        """The options `to_settings` stored, for a run kept in `store`; what runs stored
        before an option was stored lack runs with its default."""
        default = cls()
        stored = {name: settings.get(key, getattr(default, name)) for key, name in _STORED.items()}
        return cls(**stored, store=store, json_path=json_path)


# RunOptions fields under their keys in a run's stored settings. Not stored: where
# the run is kept and its JSON written (a resume is told), build_timeout_s and
# fixed_seconds (a resume runs with their defaults).
_STORED = {
    "batch_sizes": "batch_sizes",
    "threads": "threads",
    "quick": "quick",
    "budget_s": "budget_s",
    "trial_timeout_s": "trial_timeout_s",
    "seed": "seed",
    "explicit_runtimes": "runtimes",
    "explicit_precisions": "precisions",
    "margin": "margin",
    "ci_target": "ci_target",
    "scenario": "scenario",
    "latency_bound_ms": "latency_bound_ms",
    "cold_starts": "cold_starts",
    "target": "target",
    "explicit_constraints": "constraints",
}


@dataclass
class RunResult:
    run_id: str
    document: dict[str, Any]
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if any(v.winner for v in self.verdicts) else 1


def _check_choices(values: list[str] | None, allowed: tuple[str, ...], flag: str) -> None:
    for v in values or []:
        if v not in allowed:
            raise UserError(f"{flag}: unknown value {v!r}; expected one of {', '.join(allowed)}")


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _split(workload: Workload, quick: bool) -> dict[str, np.ndarray]:
    """Shuffle once (seeded), then cut: quality hold-out | timing pool (+ calibration).

    Each batched input is cut along its own batch axis; constants are stored once
    (see bakeoff.batching for the file's keys).
    """
    layout = Layout.of(workload.source)
    n = workload.n_samples
    order = np.random.default_rng(SPLIT_SEED).permutation(n)
    asked = workload.spec.data.quality_samples if workload.spec.data else None
    wanted = asked or min(64 if quick else 256, n // 2)
    n_quality = max(1, min(wanted, n - 2))
    quality_idx, pool_idx = order[:n_quality], order[n_quality:]
    calib_idx = pool_idx[: min(len(pool_idx), 32 if quick else 128)]
    splits = {
        "quality": layout.take(workload.inputs, quality_idx),
        "pool": layout.take(workload.inputs, pool_idx),
        "calib": layout.take(workload.inputs, calib_idx),
    }
    extra = layout.npz_keys(workload.inputs)
    arrays: dict[str, np.ndarray] = {}
    # Input order is kept in the file (constants where they stand among the inputs):
    # readers without the workload (export) take the names from it.
    for name in workload.inputs:
        if name in layout.constants:
            arrays[CONST_PREFIX + name] = extra[CONST_PREFIX + name]
            continue
        for split, cut in splits.items():
            arrays[f"{split}/{name}"] = cut[name]
    arrays.update({k: v for k, v in extra.items() if not k.startswith(CONST_PREFIX)})
    if workload.source.variable_axes:
        # The same held-out samples at a second shape: variable axes cut to half.
        for name, alt in splits["quality"].items():
            if name in layout.constants:
                continue
            for axis in workload.source.variable_axes.get(name, []):
                alt = np.take(alt, np.arange(max(1, alt.shape[axis] // 2)), axis=axis)
            arrays[f"{ALT_SPLIT}/{name}"] = alt
    if workload.labels is not None:
        arrays["quality_labels"] = workload.labels[quality_idx]
    return arrays


def _reference_variant(kind: str) -> Variant:
    return reference_variant(kind)  # one map of kind -> reference, shared with the advice


def _measure_settings(opts: RunOptions, threads: int, n_groups: int) -> MeasureSettings:
    budget = opts.budget_s if opts.budget_s is not None else (40.0 if opts.quick else 120.0)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if opts.fixed_seconds is not None:
        # The way common tools measure: 10 warm-up calls, then one long block per
        # candidate, one candidate after the other. Kept for comparison only.
        return MeasureSettings(
            threads=threads,
            cpus=cpus,
            trial_timeout_s=max(opts.trial_timeout_s, 3 * opts.fixed_seconds),
            warmup_s=0.0,
            warmup_calls=10,
            slice_s=opts.fixed_seconds,
            settle_s=0.0,
            min_rounds=1,
            max_rounds=1,
            budget_s=float("inf"),
            seed=opts.seed,
            racing=False,
        )
    return MeasureSettings(
        scenario=opts.scenario,
        server_bound_ms=opts.latency_bound_ms,
        server_duration_s=3.0 if opts.quick else 10.0,
        server_steps=5 if opts.quick else 7,
        offline_duration_s=2.0 if opts.quick else 5.0,
        cold_starts=opts.cold_starts,
        threads=threads,
        cpus=cpus,
        trial_timeout_s=opts.trial_timeout_s,
        warmup_s=0.3 if opts.quick else 1.0,
        warmup_calls=2 if opts.quick else 3,
        slice_s=0.25,
        settle_s=0.05,
        min_rounds=5 if opts.quick else 8,
        max_rounds=15 if opts.quick else 60,
        budget_s=budget / max(1, n_groups),
        seed=opts.seed,
    )


def _require_loadgen(scenario: str) -> None:
    import importlib.util

    if importlib.util.find_spec("mlperf_loadgen") is None:
        from bakeoff.measure.scenarios import INSTALL

        raise UserError(f"--scenario {scenario} needs MLPerf LoadGen: {INSTALL}")


def _workload_ref(ref: str | None) -> str:
    """What a resumed run loads again: builtins by name, files by absolute path."""
    ref = ref or "builtin:minilm"
    return ref if ref.startswith("builtin:") else str(Path(ref).resolve())


def run(
    workload_ref: str | None,
    opts: RunOptions | None = None,
    reporter: Reporter | None = None,
    resume_record: dict[str, Any] | None = None,
) -> RunResult:
    """Build, check and measure every candidate; decide per batch size; store everything.

    With `resume_record` (see `resume`), the run continues under its own id:
    finished candidates and measured rounds are taken from the store, not redone.
    """
    opts = opts or RunOptions()
    rep = reporter or NullReporter()
    _check_choices(opts.runtimes, runtime_names(), "--runtimes")
    if opts.precisions == ["all"]:
        opts = dataclasses.replace(opts, precisions=list(PRECISIONS))
    _check_choices(opts.precisions, PRECISIONS, "--precisions")
    if opts.batch_sizes is not None and any(b < 1 for b in opts.batch_sizes):
        raise UserError("--batch-sizes: every batch size must be a positive integer")
    if opts.cold_starts < 1:
        raise UserError("--cold-starts must be at least 1")
    if opts.budget_s is not None and not opts.budget_s > 0:
        raise UserError(f"--budget: seconds of measuring, a positive number, got {opts.budget_s}")
    if not opts.trial_timeout_s > 0:
        raise UserError(
            f"--trial-timeout: a positive number of seconds, got {opts.trial_timeout_s}"
        )
    if opts.threads is not None and opts.threads < 1:
        raise UserError(f"--threads must be at least 1, got {opts.threads}")
    if opts.margin is not None and not 0.0 <= opts.margin < 0.5:
        raise UserError(f"--margin must be in [0, 0.5), got {opts.margin}")
    if opts.ci_target is not None and not 0.0 < opts.ci_target < 0.5:
        raise UserError(f"--ci-target must be in (0, 0.5), got {opts.ci_target}")
    for key, limit in (opts.constraints or {}).items():
        if key not in ConstraintsSpec.model_fields:
            raise UserError(
                f"unknown constraint {key!r}; expected one of "
                + ", ".join(ConstraintsSpec.model_fields)
            )
        if not limit > 0:
            raise UserError(f"--{key.replace('_', '-')} must be positive, got {limit:g}")
    if opts.fixed_seconds is not None and not opts.fixed_seconds > 0:
        raise UserError(f"fixed_seconds must be positive, got {opts.fixed_seconds}")
    if opts.scenario not in SCENARIOS:
        raise UserError(
            f"--scenario: expected one of {', '.join(SCENARIOS)}, got {opts.scenario!r}"
        )
    if opts.scenario != "latency":
        _require_loadgen(opts.scenario)
    if opts.scenario == "server" and opts.latency_bound_ms <= 0:
        raise UserError("--latency-bound-ms must be positive")
    t_start = time.perf_counter()
    rep.stage("loading workload")
    workload = load_workload(workload_ref)
    for note in workload.notes:
        rep.stage(f"note: {note}")
    flags = {"margin": opts.margin, "ci_target": opts.ci_target}
    if overrides := {k: v for k, v in flags.items() if v is not None}:
        search = workload.spec.search.model_copy(update=overrides)
        workload = dataclasses.replace(
            workload, spec=workload.spec.model_copy(update={"search": search})
        )
    if opts.constraints:
        limits = {**workload.spec.constraints.model_dump(), **opts.constraints}
        workload = dataclasses.replace(
            workload,
            spec=workload.spec.model_copy(update={"constraints": ConstraintsSpec(**limits)}),
        )
    search = workload.spec.search
    advice = _advice_for(workload, opts.target)
    runtimes = opts.runtimes or search.runtimes
    precisions = opts.precisions or list(search.precisions)
    candidates_from = "flags" if opts.runtimes else "workload"
    # Who chose the grid's runtimes and precisions: the advice says, for what it did
    # not measure, whether it left it out itself or the user did.
    grid_from = {
        "runtimes": "--runtimes" if opts.runtimes else "workload",
        "precisions": "--precisions"
        if opts.precisions
        else "workload"
        if "precisions" in search.model_fields_set
        else "defaults",
    }
    left_out: dict[str, str] = {}  # variant id: why the advice leaves it out
    if opts.runtimes is None and "runtimes" not in search.model_fields_set:
        # No search given: the advice picks runtimes (and precisions, unless given);
        # the per-kind defaults stay for models the advice has nothing measurable for.
        runtimes, candidates_from = default_runtimes(workload.source.kind), "defaults"
        grid_from["runtimes"] = "defaults"
        advised_runtimes, advised_precisions = advice.run_grid()
        if workload.spec.candidates:  # hand-written candidates replace any search
            advised_runtimes, candidates_from = [], "workload candidates"
            grid_from = {"runtimes": "candidates", "precisions": "candidates"}
        known = runtime_names()
        advised_runtimes = [r for r in advised_runtimes if r in known]
        if advised_runtimes:
            runtimes, candidates_from = advised_runtimes, "advice"
            grid_from["runtimes"] = "advice"
            left_out = advice.left_out_methods()
            if opts.precisions is None and "precisions" not in search.model_fields_set:
                precisions = advised_precisions or precisions
                grid_from["precisions"] = "advice" if advised_precisions else "defaults"
    elif workload.spec.candidates:
        grid_from = {"runtimes": "candidates", "precisions": "candidates"}
    if resume_record is not None:
        # Variants the interrupted run found it did not need stay left out.
        for vid, why in (resume_record["settings"].get("left_out") or {}).items():
            left_out.setdefault(vid, why)
    batch_sizes = sorted(set(opts.batch_sizes or search.batch_sizes))
    if opts.scenario == "server" and 1 not in batch_sizes:
        batch_sizes = [1, *batch_sizes]  # server queries carry one sample each
    threads = opts.threads or search.threads or environment.default_threads()

    # Absolute: build steps change directory (quantizers litter the working one).
    store_path = Path(opts.store).resolve()
    run_id = new_run_id() if resume_record is None else resume_record["run_id"]
    folder = RunFolder.of(store_path, run_id)
    lock = _hold_run_lock(folder, run_id)  # before the store is touched
    store = Store(store_path)
    status = "failed"
    try:
        folder.artifacts.mkdir(parents=True, exist_ok=resume_record is not None)
        data_path = folder.data
        split = _split(workload, opts.quick)
        if resume_record is None or not data_path.exists():
            np.savez(data_path, **split)  # type: ignore[arg-type]
        labels = split.get("quality_labels")
        input_names = list(workload.inputs)
        env = environment.fingerprint()
        # A resume runs with these options again: the flags as given, with the batch
        # sizes, threads, margin and CI target this run settled on.
        settled = dataclasses.replace(
            opts,
            batch_sizes=batch_sizes,
            threads=threads,
            margin=search.margin,
            ci_target=search.ci_target,
        )
        settings = {
            "workload_ref": _workload_ref(workload_ref),
            "quality": {
                "metric": workload.spec.quality.metric,
                "max_drop": workload.spec.quality.max_drop,
            },
            "runtimes": runtimes,
            "precisions": precisions,
            **settled.to_settings(),
            "candidates_from": candidates_from,
            "grid_from": grid_from,
            "left_out": left_out,
        }
        if workload.spec.candidates:
            candidates = explicit_candidates(
                workload.spec.candidates,
                opts.runtimes,
                opts.precisions,
                batch_sizes,
                workload.source.kind,
            )
        else:
            candidates = enumerate_candidates(
                runtimes, precisions, batch_sizes, workload.source.kind, frozenset(left_out)
            )
        if resume_record is None:
            store.start_run(run_id, workload.origin, env, settings)
        else:
            try:
                _check_resumable(resume_record, workload, env, candidates, folder, split)
            except UserError:
                status = resume_record["status"]  # refused: the run stays as it was
                raise
            store.mark_running(run_id)
        # Said first: a killed run cannot say later which id to resume.
        rep.stage(f"run {run_id}; if it is interrupted, `{resume_command(run_id, opts.store)}`")
        for vid, why in left_out.items():
            rep.stage(f"left out {vid}: {why}")
        job_base = JobBase(
            source=workload.source,
            data_path=str(data_path),
            input_names=tuple(input_names),
            artifacts_dir=str(folder.artifacts),
            # The quality gate, for build steps that tune to it (NNCF accuracy control).
            metric=workload.spec.quality.metric,
            max_drop=workload.spec.quality.max_drop,
            # A grid leaves out a variant another one makes unnecessary; a hand-written
            # candidate is built as asked.
            skip_unneeded=not workload.spec.candidates,
        )
        if resume_record is not None:
            _restore(candidates, resume_record, store)
        rep.candidates(candidates)
        result = _run_stages(
            workload,
            opts,
            rep,
            store,
            run_id,
            folder,
            job_base,
            candidates,
            threads,
            labels,
            batch_sizes,
            env,
            settings,
            t_start,
            advice.to_dict(),
        )
        status = "done"
        return result
    except KeyboardInterrupt:
        status = "interrupted"
        rep.stage(
            f"interrupted: what finished is in the store; "
            f"`{resume_command(run_id, opts.store)}` finishes the run"
        )
        raise
    finally:
        if status != "done":
            store.finish_run(run_id, status, None)
        store.close()
        lock.close()


def _hold_run_lock(folder: RunFolder, run_id: str) -> IO[str]:
    """One process at a time per run: a resume while the run still runs elsewhere
    would measure its rounds twice. The lock goes with its process, even on SIGKILL
    (workers do not inherit the file)."""
    import fcntl

    folder.path.mkdir(parents=True, exist_ok=True)
    f = open(folder.lock, "a+")  # noqa: SIM115 (held until the run ends)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise UserError(
            f"run {run_id} is being run right now by {holder}; wait for it to finish, or "
            "stop it (Ctrl-C) and then resume"
        ) from None
    f.truncate(0)
    f.write(f"process {os.getpid()}")
    f.flush()
    return f


FINAL = ("ok", "rejected", "failed", "unavailable")


def _check_resumable(
    record: dict[str, Any],
    workload: Workload,
    env: dict[str, Any],
    candidates: list[Candidate],
    folder: RunFolder,
    split: dict[str, np.ndarray],
) -> None:
    """Refuse to resume when what the stored rounds were measured with has changed:
    the finished run would mix two models, two workloads or two library versions."""
    start_over = "; put it back as it was to resume, or start a new run"
    run_id = record["run_id"]
    then = {d["id"] for d in record["candidates"]}
    now = {c.id for c in candidates}
    if then and then != now:  # none stored: killed before the candidates were saved
        added, gone = sorted(now - then), sorted(then - now)
        raise UserError(
            f"the workload now gives other candidates than when run {run_id} started"
            + (f" (new: {', '.join(added)})" if added else "")
            + (f" (no longer: {', '.join(gone)})" if gone else "")
            + start_over
        )
    stored = folder.data
    if stored.exists():
        with np.load(stored, allow_pickle=False) as then_data:
            same = set(then_data.files) == set(split) and all(
                np.array_equal(then_data[k], v) for k, v in split.items()
            )
            then_layout = layout_in(then_data)
        if then_layout != layout_in(split):
            raise UserError(
                f"the workload's data.batch_axes or data.constants changed since run {run_id} "
                f"started (then {dict(then_layout.batch_axes)} and "
                f"{list(then_layout.constants)}){start_over}"
            )
        if not same:
            raise UserError(f"the workload's data changed since run {run_id} started{start_over}")
    quality = record["settings"].get("quality")  # runs stored before this check lack it
    spec = workload.spec.quality
    if quality and (quality["metric"], quality["max_drop"]) != (spec.metric, spec.max_drop):
        raise UserError(
            f"the workload's quality gate changed since run {run_id} started (then "
            f"{quality['metric']} max_drop {quality['max_drop']:g}, now {spec.metric} "
            f"max_drop {spec.max_drop:g}){start_over}"
        )
    old_packages = record["environment"].get("packages") or {}
    new_packages = env.get("packages") or {}
    changed = [
        f"{name} {old_packages.get(name)} -> {new_packages.get(name)}"
        for name in sorted(set(old_packages) | set(new_packages))
        if old_packages.get(name) != new_packages.get(name)
    ]
    if changed:
        raise UserError(
            f"installed runtimes changed since run {run_id} started ({'; '.join(changed)}): "
            "its rounds were measured with the old versions; reinstall those to resume, "
            "or start a new run"
        )
    built_with = variant_cache.run_model_hash(folder.artifacts)
    if built_with is not None:
        model = variant_cache.model_hash(workload.source)
        if model["hash"] != built_with:
            raise UserError(
                f"the model changed since run {run_id} started (its files: "
                f"{', '.join(model['files']) or 'none'}, or its [model] settings){start_over}"
            )


def _restore(candidates: list[Candidate], record: dict[str, Any], store: Store) -> None:
    """Put back what a killed run finished: final candidates whole, as their stored
    documents say, and the measured rounds of every candidate (from its trials)."""
    docs = {d["id"]: d for d in record["candidates"]}
    for i, c in enumerate(candidates):
        doc = docs.get(c.id)
        if doc is None:
            continue
        if doc["status"] in FINAL and c.status != "unavailable":
            c = candidates[i] = Candidate.from_json(doc)
        else:
            c.settings = dict(doc.get("settings") or {})
        rounds = store.rounds(record["run_id"], c.id)
        c.rounds_ns = [lat for _, lat, _, _ in rounds]
        c.block_ns = [block for _, _, block, _ in rounds]
        c.round_slots = [process for _, _, _, process in rounds]


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
    if "workload_ref" not in st:
        raise UserError(f"run {record['run_id']} was stored without what is needed to resume it")
    opts = RunOptions.from_settings(st, store=store, json_path=json_path)
    return run(st["workload_ref"], opts, reporter, resume_record=record)


def _run_stages(
    workload: Workload,
    opts: RunOptions,
    rep: Reporter,
    store: Store,
    run_id: str,
    folder: RunFolder,
    job_base: JobBase,
    candidates: list[Candidate],
    threads: int,
    labels: np.ndarray | None,
    batch_sizes: list[int],
    env: dict[str, Any],
    settings: dict[str, Any],
    t_start: float,
    advice: dict[str, Any] | None = None,
) -> RunResult:
    def save(c: Candidate) -> None:
        store.put_candidate(run_id, candidate_document(c))

    for c in candidates:
        save(c)

    # ---- build every distinct variant once, each in its own process
    t_build = time.perf_counter()
    artifacts_dir = folder.artifacts
    # The run's base key for the variant cache: model files, calibration data and
    # library versions hashed once here; each build step adds its own name.
    rep.stage(
        variant_cache.prepare_run(
            artifacts_dir,
            workload.source,
            Path(job_base.data_path),
            list(job_base.input_names),
            env.get("packages", {}),
        )
    )
    reused, with_steps, saved_s, nothing_to_build = 0, 0, 0.0, []
    reference_variant = _reference_variant(workload.source.kind)
    # The reference is built and run first: a model or data that the FP32 reference
    # cannot run stops the run before minutes of exporting and quantizing.
    variants: dict[str, Variant] = {reference_variant.id: reference_variant}
    for c in candidates:
        if c.status == "pending":
            variants.setdefault(c.variant.id, c.variant)
    built: dict[str, dict[str, Any] | str] = {}

    def build_variant(i: int, vid: str, variant: Variant) -> None:
        nonlocal reused, with_steps, saved_s
        rep.progress("building", i, len(variants))
        rep.stage(f"building {vid}")
        mark = variant_cache.events_offset(artifacts_dir)
        try:
            reply = run_job(
                BuildJob(base=job_base, variant=variant, threads=threads),
                threads,
                folder.log(f"build-{vid}"),
                opts.build_timeout_s,
            )
            # Which of its steps were built, reused in this run or taken from the cache.
            use = variant_cache.summarize(variant_cache.read_events(artifacts_dir, mark))
            built[vid] = {
                **reply["artifact"],
                "cache_hit": use.from_cache,
                "_build_s": reply["build_s"],
            }
            rep.stage(use.describe(vid, reply["build_s"]))
            saved_s += use.saved_s
            if use.from_cache is None:
                nothing_to_build.append(vid)
            else:
                with_steps += 1
                reused += use.from_cache
        except WorkerFailed as exc:
            if exc.not_needed:
                _leave_out(vid, str(exc))
                return
            built[vid] = f"build failed: {exc}"
            rep.stage(f"{vid}: {built[vid]}")
        for c in candidates:
            if c.variant.id == vid and c.status == "pending":
                b = built[vid]
                if isinstance(b, str):
                    c.set_status("failed", b)
                else:
                    c.artifact = {k: v for k, v in b.items() if k != "_build_s"}
                    c.build_s = b["_build_s"]
                save(c)
        rep.candidates(candidates)

    def _leave_out(vid: str, why: str) -> None:
        """A variant another one made unnecessary: not a candidate row (nothing is
        missing), but listed with why beside what the advice left out."""
        settings.setdefault("left_out", {})[vid] = why
        gone = [c for c in candidates if c.variant.id == vid]
        candidates[:] = [c for c in candidates if c.variant.id != vid]
        store.leave_out(run_id, [c.id for c in gone], settings)
        rep.stage(f"left out {vid}: {why}")
        rep.candidates(candidates)

    build_variant(0, reference_variant.id, reference_variant)

    # ---- the FP32 reference outputs on the quality hold-out
    t_ref = time.perf_counter()
    rep.stage(f"computing reference outputs ({reference_variant.id})")
    ref_art = built[reference_variant.id]
    if isinstance(ref_art, str):
        raise BakeoffError(
            f"the FP32 reference {reference_variant.id} could not be built: {ref_art}"
        )
    ref_path = folder.reference
    try:
        run_job(
            ReferenceJob(
                base=job_base,
                load=LoadSpec(
                    variant=reference_variant,
                    artifact={k: v for k, v in ref_art.items() if k != "_build_s"},
                    batch_size=batch_sizes[0],
                    threads=threads,
                ),
                outputs_path=str(ref_path),
            ),
            threads,
            folder.log("reference"),
            opts.trial_timeout_s,
        )
    except WorkerFailed as exc:
        raise BakeoffError(
            f"the FP32 reference ({reference_variant.id}, batch {batch_sizes[0]}) failed, so "
            f"no variant can be quality-checked: {exc}"
        ) from None
    reference = np.load(ref_path, allow_pickle=False)
    ref_alt_path = alt_outputs_path(ref_path)
    reference_alt = np.load(ref_alt_path, allow_pickle=False) if ref_alt_path.exists() else None
    reference_s = time.perf_counter() - t_ref

    # ---- then every other distinct variant once, each in its own process
    for i, (vid, variant) in enumerate(variants.items()):
        if i > 0:
            build_variant(i, vid, variant)
    rep.progress("building", len(variants), len(variants))
    build_s = time.perf_counter() - t_build - reference_s
    variant_cache.record_variants(
        artifacts_dir,
        {
            vid: {k: v for k, v in b.items() if k != "_build_s"}
            for vid, b in built.items()
            if not isinstance(b, str)
        },
    )
    cache_summary = {
        "reused": reused,
        "variants": with_steps,
        "nothing_to_build": nothing_to_build,
        "saved_s": round(saved_s, 3),
        "enabled": (artifacts_dir / variant_cache.KEY_FILE).exists(),
    }
    rep.stage(
        f"variant cache: {reused} of {with_steps} variants reused, "
        f"{saved_s:.1f} s of building saved"
        + (f" ({', '.join(nothing_to_build)}: nothing to build)" if nothing_to_build else "")
    )

    # ---- measure each batch-size group: candidates interleaved within a group
    limits = {k: v for k, v in workload.spec.constraints.model_dump().items() if v is not None}
    t_measure = time.perf_counter()
    ms = _measure_settings(opts, threads, len(batch_sizes))
    ctx = GroupContext(
        job_base=job_base,
        run_dir=folder.path,
        reference=reference,
        reference_alt=reference_alt,
        labels=labels,
        metric=workload.spec.quality.metric,
        max_drop=workload.spec.quality.max_drop,
    )

    def record(
        c: Candidate, r: int, kind: str, lat: list[int], block: int | None, process: int
    ) -> None:
        store.add_trial(run_id, c.id, r, kind, lat, block, process)

    def notify(message: str, c: Candidate | None) -> None:
        rep.stage(message)
        if c is not None:
            save(c)
        rep.candidates(candidates)

    verdicts: list[Verdict] = []
    phases = {"load_and_quality": 0.0, "warmup": 0.0, "rounds": 0.0, "cold_start": 0.0}
    search = workload.spec.search
    noise_before = environment.noise_snapshot()
    during: list[dict[str, Any]] = []
    group_sizes = sorted({c.batch_size for c in candidates})
    for bs in group_sizes:
        group = [c for c in candidates if c.batch_size == bs and c.status == "pending"]
        objective = objective_for(bs, search.objective)
        group_settings = dataclasses.replace(
            ms,
            objective=objective,
            margin=search.margin,
            ci_target=search.ci_target,
            constraints=limits,
        )
        for c in group:
            if (earlier := _rejected_at_another_batch_size(c, candidates)) is not None:
                c.quality, c.quality_alt = earlier.quality, earlier.quality_alt
                c.set_status(
                    "rejected",
                    f"{earlier.reason} (at batch size {earlier.batch_size}; "
                    "the same variant is not loaded again)",
                )
                save(c)
                rep.stage(f"{c.id}: rejected: {c.reason}")
        group = [c for c in group if c.status == "pending"]
        rep.stage(f"measuring batch size {bs} ({len(group)} candidates)")
        group_phases, use = measure_group(group, ctx, group_settings, record, notify)
        if group:
            # A candidate raced out before an interruption came back from the store
            # finished but unjudged (validity is set when its group ends): judge it
            # now, beside the rest of its group.
            same = [c for c in candidates if c.batch_size == bs]
            for c in same:
                if c.status == "ok" and all(c is not g for g in group):
                    set_validity(c, ms.min_rounds, objective, use, same)
        for phase, seconds in group_phases.items():
            phases[phase] += seconds
        if use is not None:
            during.append({"batch_size": bs, **use})
            if use["busy"]:
                rep.stage(
                    f"warning: other processes used {use['other_cores_mean']:.2f} cores on "
                    f"average while batch size {bs} was measured; its results are marked noisy"
                )
        for c in candidates:
            if c.batch_size == bs:
                save(c)
        rep.candidates(candidates)
        same_bs = [c for c in candidates if c.batch_size == bs]
        measured = [
            Measured(c.id, c.samples(), np.asarray(c.block_ns), bs, np.asarray(c.round_slots))
            for c in same_bs
            if c.status == "ok"
        ]
        not_ok = {c.id: f"{c.status}: {c.reason}" for c in same_bs if c.status != "ok"}
        excluded = {}
        for c in same_bs:
            if c.status == "ok" and limits:
                c.constraint_violations = constraint_violations(candidate_document(c), limits)
                if c.constraint_violations:
                    excluded[c.id] = "; ".join(c.constraint_violations)
                    save(c)
        # The baseline is the reference variant (PyTorch eager FP32, or ONNX Runtime
        # FP32 for ONNX models); hand-written candidates without it use their first.
        baseline = next((c for c in same_bs if c.variant == reference_variant), None)
        if baseline is None and workload.spec.candidates and same_bs:
            baseline = same_bs[0]
        baseline_id = baseline.id if baseline else f"{reference_variant.id}-b{bs}"
        decided = decide(
            bs,
            objective,
            measured,
            baseline_id,
            not_ok,
            margin=search.margin,
            min_rounds=ms.min_rounds,
            excluded=excluded,
        )
        caveat = busy_caveat(use, same_bs)
        if caveat:
            decided = decided.with_caveat(caveat)
        verdicts.append(decided)
    measure_s = time.perf_counter() - t_measure
    noise_after = environment.noise_snapshot()

    document = {
        "schema_version": SCHEMA_VERSION,
        "bakeoff_version": bakeoff.__version__,
        "run_id": run_id,
        "workload": {
            "name": workload.name,
            "origin": workload.origin,
            "model_kind": workload.source.kind,
            "metric": workload.spec.quality.metric,
            "max_drop": workload.spec.quality.max_drop,
            "samples": workload.n_samples,
            "quality_samples": len(reference),
            "reference": reference_variant.id,
            "variable_axes": workload.source.variable_axes,
            "batch_axes": workload.source.batch_axes,
            "constants": workload.source.constants,
            "constraints": limits,
            "notes": list(workload.notes),
        },
        "environment": env,
        "settings": settings,
        "candidates": [candidate_document(c) for c in candidates],
        "verdicts": [v.to_dict() for v in verdicts],
        "noise": {"before": noise_before, "during": during, "after": noise_after},
        "variant_cache": cache_summary,
        "timing_s": {
            "build": round(build_s, 3),
            "build_saved_by_cache": round(saved_s, 3),
            "reference": round(reference_s, 3),
            "measure": round(measure_s, 3),
            **{f"measure_{k}": round(v, 3) for k, v in phases.items()},
            "total": round(time.perf_counter() - t_start, 3),
        },
    }
    if advice is not None:
        # Per piece of advice: did the measurement confirm it?
        document["advice"] = advising.confirmations(advice, document)
    store.finish_run(run_id, "done", document)
    if opts.json_path:
        write_json(document, Path(opts.json_path))
    return RunResult(run_id, document, verdicts)


def _rejected_at_another_batch_size(c: Candidate, candidates: list[Candidate]) -> Candidate | None:
    """The same variant (runtime, precision, method, label, options) already rejected
    by the quality gate at another batch size, if any.

    The gate judges the built variant; the batch size only groups the same inputs
    differently, so loading it again would cost a worker start and a quality pass
    (about 8 s each for MiniLM's rejected INT8 variants) to learn the same thing.
    """
    same = [
        other
        for other in candidates
        if other.status == "rejected"
        and other.quality is not None
        and other.batch_size != c.batch_size
        and other.variant == c.variant
        and other.label == c.label
        and other.options == c.options
    ]
    # The smallest batch size is the one that was loaded (groups go in ascending order).
    return min(same, key=lambda other: other.batch_size, default=None)


def busy_caveat(use: dict[str, Any] | None, group: list[Candidate]) -> str | None:
    """What a verdict says when other processes crowded the machine while its batch
    size was measured: it is read on its own (CI logs, compare), so it says so itself.
    Nothing for a group timed on a virtual clock (the fake runtime), which no
    neighbour can move."""
    timed = [c for c in group if c.status == "ok" and not c.settings.get("virtual_clock")]
    if use is None or not use["busy"] or not timed:
        return None
    return (
        f"Other processes used {use['other_cores_mean']:.2f} cores on average while batch "
        f"size {timed[0].batch_size} was measured (gate {use['gate_cores']:.2f}), so these "
        "figures are marked noisy: "
        "measure again on a quiet machine."
    )


def _advice_for(workload: Workload, target: str | None) -> advising.AdviceReport:
    """The advice for a loaded workload: facts from its model files, goal from its
    [search] objective when that names one."""
    src = workload.source
    facts = advising.detect_facts(workload.origin, src.kind, src.path, src.weights, src.factory)
    objective = workload.spec.search.objective
    goal = objective if objective in advising.GOALS else None
    return advising.advise_facts(facts, target, goal)


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


def write_json(document: dict[str, Any], path: Path) -> None:
    """Write atomically: a reader never sees half a document."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(document, indent=2, default=_json_default))
    os.replace(tmp, path)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


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
