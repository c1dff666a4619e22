"""Measuring a run batch size by batch size: each group's candidates go through the
trial engine together (interleaved within the group), then get their verdict."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bakeoff import environment
from bakeoff.backends import Variant, any_batch_size, compiles_when_loaded
from bakeoff.candidates import Candidate
from bakeoff.inference.context import RunContext, RunEvents
from bakeoff.inference.early import EarlyLoad
from bakeoff.inference.gate import QualityGate
from bakeoff.inference.jobs import CandidateJobs
from bakeoff.inference.options import ScenarioSettings, scenario_settings, trial_settings
from bakeoff.inference.reference import Reference
from bakeoff.inference.scenarios import after_rounds, repeat_cold_starts
from bakeoff.inference.shared_workers import SharedWorkers, build_key, first_job
from bakeoff.judge.constraints import constraint_violations
from bakeoff.judge.recommend import Traits, recommend
from bakeoff.judge.verdict import Measured, Verdict, decide, objective_for
from bakeoff.trials.engine import Engine, run_trials
from bakeoff.trials.launcher import Launcher
from bakeoff.trials.settings import TrialSettings
from bakeoff.trials.validity import set_validity


@dataclass
class Measuring:
    """What measuring every group found, beside the candidates themselves."""

    verdicts: list[Verdict] = field(default_factory=list)
    phases: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(
            ("load_and_quality", "warmup", "rounds", "cold_start"), 0.0
        )
    )
    during: list[dict[str, Any]] = field(default_factory=list)  # machine use per group
    seconds: float = 0.0


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


def _pending_group(ctx: RunContext, bs: int) -> list[Candidate]:
    """The group's candidates still to measure; one whose variant the gate rejected at
    a smaller batch size is rejected here too, without loading it again."""
    group = [c for c in ctx.candidates if c.batch_size == bs and c.status == "pending"]
    for c in group:
        if (earlier := _rejected_at_another_batch_size(c, ctx.candidates)) is not None:
            c.quality, c.quality_alt = earlier.quality, earlier.quality_alt
            checked_at = earlier.worker.get("quality_batch_size", earlier.batch_size)
            c.set_status(
                "rejected",
                f"{earlier.reason} (checked at batch size {checked_at} by the worker of "
                f"{earlier.id}; the same variant is not loaded again)",
            )
            ctx.save(c)
            ctx.rep.stage(f"{c.id}: rejected: {c.reason}")
    return [c for c in group if c.status == "pending"]


def _baseline_id(ctx: RunContext, bs: int, reference: Variant) -> str:
    """The candidate a group's speedups are over: the reference variant (PyTorch
    eager FP32, or ONNX Runtime FP32 for ONNX models); hand-written candidates
    without it use their first."""
    same_bs = [c for c in ctx.candidates if c.batch_size == bs]
    baseline = next((c for c in same_bs if c.variant == reference), None)
    if baseline is None and ctx.workload.spec.candidates and same_bs:
        baseline = same_bs[0]
    return baseline.id if baseline else f"{reference.id}-b{bs}"


def _decide(
    ctx: RunContext,
    bs: int,
    s: TrialSettings,
    reference: Variant,
    use: dict[str, Any] | None,
) -> Verdict:
    """The group's verdict, constraints judged on each candidate's own figures."""
    same_bs = [c for c in ctx.candidates if c.batch_size == bs]
    measured = [
        Measured(c.id, c.samples(), np.asarray(c.block_ns), bs, np.asarray(c.round_slots))
        for c in same_bs
        if c.status == "ok"
    ]
    not_ok = {c.id: f"{c.status}: {c.reason}" for c in same_bs if c.status != "ok"}
    excluded = {}
    for c in same_bs:
        if c.status == "ok" and s.constraints:
            c.constraint_violations = constraint_violations(c.figures(s.constraints), s.constraints)
            if c.constraint_violations:
                excluded[c.id] = "; ".join(c.constraint_violations)
                ctx.save(c)
    decided = decide(
        bs,
        s.objective,
        measured,
        _baseline_id(ctx, bs, reference),
        not_ok,
        margin=s.margin,
        min_rounds=s.min_rounds,
        excluded=excluded,
    )
    decided = recommend(decided, {c.id: _traits(c) for c in same_bs if c.status == "ok"})
    caveat = busy_caveat(use, same_bs)
    return decided.with_caveat(caveat) if caveat else decided


def _traits(c: Candidate) -> Traits:
    """What a recommendation among tied candidates weighs, from the candidate's own
    figures as its document reports them."""
    return Traits(
        quality_drop=None if c.quality is None else max(0.0, float(c.quality.drop)),
        peak_memory_mb=c.peak_mb(),
        cold_start_s=c.figures().cold_start_s.value,
    )


def _measure_group(
    ctx: RunContext,
    bs: int,
    engine: Engine[Candidate],
    jobs: CandidateJobs,
    scenario: ScenarioSettings,
    found: Measuring,
) -> dict[str, Any] | None:
    group = _pending_group(ctx, bs)
    ctx.rep.stage(f"measuring batch size {bs} ({len(group)} candidates)")
    outcome = run_trials(group, {c.id: jobs.load(c) for c in group}, engine)
    s = engine.settings
    if scenario.cold_starts > 1:
        t_cold = time.perf_counter()
        for c in group:
            if c.status == "ok":
                repeat_cold_starts(
                    c, jobs, engine.launcher, scenario.cold_starts, s.trial_timeout_s, engine.events
                )
        found.phases["cold_start"] += time.perf_counter() - t_cold
    if group:
        # A candidate raced out before an interruption came back from the store
        # finished but unjudged (validity is set when its group ends): judge it
        # now, beside the rest of its group.
        same = [c for c in ctx.candidates if c.batch_size == bs]
        for c in same:
            if c.status == "ok" and all(c is not g for g in group):
                set_validity(c, s.min_rounds, s.objective, outcome.machine, same)
    for phase, seconds in outcome.phases.items():
        found.phases[phase] += seconds
    return outcome.machine


def _shared_plan(candidates: list[Candidate], jobs: CandidateJobs) -> dict[str, list[int]]:
    """The batch sizes each build of a variant will be timed at, for the builds whose
    runtime runs any batch size once loaded (one worker then serves them all)."""
    plan: dict[str, list[int]] = {}
    for c in candidates:
        if c.status == "pending" and any_batch_size(c.variant.runtime):
            plan.setdefault(build_key(jobs.load(c)), []).append(c.batch_size)
    return plan


def _loading(ctx: RunContext) -> tuple[bool, int]:
    """Whether builds share one worker across batch sizes, and how many workers load
    at once. Neither where cold starts must be measured alone: a cold-start limit,
    or --worker-per-batch-size."""
    if ctx.opts.worker_per_batch_size or "max_cold_start_s" in ctx.workload.limits:
        return False, 1
    cores = environment.physical_cores()
    return True, max(1, cores)


def _candidate_jobs(ctx: RunContext) -> CandidateJobs:
    return CandidateJobs(ctx.job_base, ctx.folder, ctx.threads, scenario_settings(ctx.opts).cpus)


def early_loads(ctx: RunContext, variant_id: str) -> list[EarlyLoad]:
    """The measuring jobs of the first batch size's candidates of a variant just
    built, exactly as the engine will start them (a build shared across batch sizes
    does its quality pass at the largest), to load beside the last builds. None
    where cold starts must be measured alone, or where loads do not run side by side."""
    _, side_by_side = _loading(ctx)
    if side_by_side < 2:
        return []
    pending = [c for c in ctx.candidates if c.status == "pending"]
    if not pending:
        return []
    first = min(c.batch_size for c in pending)
    jobs = _candidate_jobs(ctx)
    mine = [c for c in pending if c.variant.id == variant_id]
    sizes = _shared_plan(mine, jobs)  # this variant's part of the engine's plan
    loads = []
    for c in mine:
        if c.batch_size == first:
            job = jobs.load(c)
            loads.append(
                EarlyLoad(
                    c.id,
                    first_job(job, sizes.get(build_key(job), [first])),
                    compiles_when_loaded(c.variant.runtime),
                )
            )
    return loads


def measure_all(ctx: RunContext, launcher: Launcher, reference: Reference) -> Measuring:
    """Every batch-size group in ascending order, each with its verdict."""
    scenario = scenario_settings(ctx.opts)
    jobs = _candidate_jobs(ctx)
    share, side_by_side = _loading(ctx)
    shared = SharedWorkers(launcher, _shared_plan(ctx.candidates, jobs) if share else {})
    try:
        return _measure_groups(ctx, shared, reference, jobs, scenario, side_by_side)
    finally:
        shared.close()


def _measure_groups(
    ctx: RunContext,
    launcher: Launcher,
    reference: Reference,
    jobs: CandidateJobs,
    scenario: ScenarioSettings,
    side_by_side: int,
) -> Measuring:
    workload = ctx.workload
    search = workload.spec.search
    t_measure = time.perf_counter()
    base = trial_settings(ctx.opts, ctx.threads, len(ctx.batch_sizes))
    gate = QualityGate.of(
        workload.spec.quality, reference.outputs, reference.outputs_alt, ctx.labels
    )
    events = RunEvents(ctx)
    found = Measuring()
    # Loads that compile start first when loads run side by side.
    slow = frozenset(c.id for c in ctx.candidates if compiles_when_loaded(c.variant.runtime))
    for bs in sorted({c.batch_size for c in ctx.candidates}):
        s = dataclasses.replace(
            base,
            objective=objective_for(bs, search.objective),
            margin=search.margin,
            ci_target=search.ci_target,
            constraints=workload.limits,
            load_side_by_side=side_by_side,
        )
        hooks = after_rounds(jobs, scenario, s, events, launcher, gate)
        baselines = frozenset({_baseline_id(ctx, bs, reference.variant)})
        engine = Engine(gate, launcher, s, events, hooks, load_first=slow, baselines=baselines)
        use = _measure_group(ctx, bs, engine, jobs, scenario, found)
        if use is not None:
            found.during.append({"batch_size": bs, **use})
            if use["busy"]:
                ctx.rep.stage(
                    f"warning: other processes used {use['other_cores_mean']:.2f} cores on "
                    f"average while batch size {bs} was measured; its results are marked noisy"
                )
        for c in ctx.candidates:
            if c.batch_size == bs:
                ctx.save(c)
        ctx.show()
        found.verdicts.append(_decide(ctx, bs, s, reference.variant, use))
    found.seconds = time.perf_counter() - t_measure
    return found
