"""One inference run, start to finish. Data flows one way: workload -> candidates ->
built variants -> reference -> measured trials -> verdicts -> document (store,
JSON, terminal).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff import advise as advising
from bakeoff import environment
from bakeoff.backends import (
    compiles_when_loaded,
    reference_choice,
    reference_variant,
    runtime_names,
)
from bakeoff.candidates import Candidate, enumerate_candidates, explicit_candidates
from bakeoff.errors import UserError
from bakeoff.inference import peak
from bakeoff.inference.context import RunContext
from bakeoff.inference.document import document, write_json
from bakeoff.inference.early import EarlyLoads, Preloads
from bakeoff.inference.gate import output_gate
from bakeoff.inference.groups import early_loads, measure_all
from bakeoff.inference.messages import JobBase
from bakeoff.inference.options import RunOptions, checked
from bakeoff.inference.resume import check_resumable, restore
from bakeoff.inference.split import split_data
from bakeoff.inference.variants import build_all
from bakeoff.judge.verdict import Verdict
from bakeoff.lifecycle import Run, lifecycle, new_run_id
from bakeoff.loader import load_workload, workload_ref
from bakeoff.paths import RunFolder, resume_command
from bakeoff.report import NullReporter, Reporter
from bakeoff.store import check_store
from bakeoff.trials.launcher import LocalLauncher
from bakeoff.workload import ConstraintsSpec, Workload, default_runtimes


@dataclass
class RunResult:
    run_id: str
    document: dict[str, Any]
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        # `recommended` is set exactly where there is a winner (judge.recommend)
        return 0 if any(v.recommended or v.winner for v in self.verdicts) else 1


@dataclass
class Grid:
    """The runtimes and precisions a run crosses, who chose them (the advice says, for
    what it did not measure, whether it left it out itself or the user did), and the
    variants the advice leaves out with why."""

    runtimes: list[str]
    precisions: list[str]
    candidates_from: str
    grid_from: dict[str, str]
    left_out: dict[str, str] = field(default_factory=dict)


def advice_for(workload: Workload, target: str | None) -> advising.AdviceReport:
    """The advice for a loaded workload: facts from its model files, goal from its
    [search] objective when that names one."""
    src = workload.source
    facts = advising.detect_facts(
        workload.origin, src.kind, src.path, src.weights, src.factory, src.weights_key
    )
    objective = workload.spec.search.objective
    goal = objective if objective in advising.GOALS else None
    return advising.advise_facts(facts, target, goal)


def _with_flags(workload: Workload, opts: RunOptions) -> Workload:
    """The workload with what the flags replace: margin, CI target, constraints."""
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
    return workload


def _grid(workload: Workload, opts: RunOptions, advice: advising.AdviceReport) -> Grid:
    search = workload.spec.search
    grid = Grid(
        runtimes=opts.runtimes or search.runtimes,
        precisions=opts.precisions or list(search.precisions),
        candidates_from="flags" if opts.runtimes else "workload",
        grid_from={
            "runtimes": "--runtimes" if opts.runtimes else "workload",
            "precisions": "--precisions"
            if opts.precisions
            else "workload"
            if "precisions" in search.model_fields_set
            else "defaults",
        },
    )
    hand_written = {"runtimes": "candidates", "precisions": "candidates"}
    if opts.runtimes is not None or "runtimes" in search.model_fields_set:
        if workload.spec.candidates:
            grid.grid_from = hand_written
        return grid
    # No search given: the advice picks runtimes (and precisions, unless given);
    # the per-kind defaults stay for models the advice has nothing measurable for.
    grid.runtimes, grid.candidates_from = default_runtimes(workload.source.kind), "defaults"
    grid.grid_from["runtimes"] = "defaults"
    advised_runtimes, advised_precisions = advice.run_grid()
    if workload.spec.candidates:  # hand-written candidates replace any search
        advised_runtimes, grid.candidates_from = [], "workload candidates"
        grid.grid_from = hand_written
    known = runtime_names()
    advised_runtimes = [r for r in advised_runtimes if r in known]
    if advised_runtimes:
        grid.runtimes, grid.candidates_from = advised_runtimes, "advice"
        grid.grid_from["runtimes"] = "advice"
        grid.left_out = advice.left_out_methods()
        if opts.precisions is None and "precisions" not in search.model_fields_set:
            grid.precisions = advised_precisions or grid.precisions
            grid.grid_from["precisions"] = "advice" if advised_precisions else "defaults"
    if opts.quick:
        _leave_out_compiling(grid, reference_variant(workload.source.kind).runtime)
        _leave_out_second_conversions(grid, workload.source.kind)
    return grid


# A runtime's variant that converts the model a second way, beside one built from
# the ONNX export the other variants share; only a PyTorch model has one.
_SECOND_CONVERSIONS = {"openvino": "fp32-direct"}
_SECOND_CONVERSION_KINDS = ("torch", "hf")


def _leave_out_second_conversions(grid: Grid, model_kind: str) -> None:
    """--quick, where bakeoff chose the runtimes: one conversion per runtime and
    precision. OpenVINO's direct conversion from PyTorch (no ONNX in between) is a
    second FP32 IR of the same model, about 10 s of building and as much again of
    loading and checking on MiniLM on 2 cores; a full run measures it. Another kind
    of model has no second conversion, so nothing is said of one."""
    if model_kind not in _SECOND_CONVERSION_KINDS:
        return
    for runtime, rest in _SECOND_CONVERSIONS.items():
        if runtime in grid.runtimes and "fp32" in grid.precisions:
            grid.left_out.setdefault(
                f"{runtime}-{rest}",
                "--quick builds one conversion per runtime and precision (this one's "
                "sibling is built from the ONNX export); run without --quick to measure it",
            )


def _leave_out_compiling(grid: Grid, reference: str) -> None:
    """--quick, where bakeoff chose the runtimes: those that compile at each batch
    size's first call are left out, with why and how to measure them. On MiniLM on
    2 cores torch.compile's compiles for two batch sizes took about 50 s of CPU
    alone, a third of a quick run's work before its first timed call; a runtime the
    user names is measured as asked, and the model's own runtime (JAX for a JAX
    function: the reference) always stays."""
    for runtime in [r for r in grid.runtimes if compiles_when_loaded(r) and r != reference]:
        grid.runtimes.remove(runtime)
        grid.left_out[runtime] = (
            "--quick leaves it out: it compiles at each batch size's first call (tens of "
            "seconds of CPU per batch size); run without --quick, or name it in "
            "--runtimes, to measure it"
        )


def _plan(
    workload: Workload,
    opts: RunOptions,
    advice: advising.AdviceReport,
    resume_record: dict[str, Any] | None,
) -> tuple[Grid, list[int], int]:
    """The grid, the batch sizes and the threads every worker gets."""
    search = workload.spec.search
    grid = _grid(workload, opts, advice)
    if resume_record is not None:
        # Variants the interrupted run found it did not need stay left out.
        for vid, why in (resume_record["settings"].get("left_out") or {}).items():
            grid.left_out.setdefault(vid, why)
    batch_sizes = sorted(set(opts.batch_sizes or search.batch_sizes))
    if opts.scenario == "server" and 1 not in batch_sizes:
        batch_sizes = [1, *batch_sizes]  # server queries carry one sample each
    threads = opts.threads or search.threads or environment.default_threads()
    return grid, batch_sizes, threads


def _candidates(
    workload: Workload, opts: RunOptions, grid: Grid, batch_sizes: list[int]
) -> list[Candidate]:
    if workload.spec.candidates:
        out = explicit_candidates(
            workload.spec.candidates,
            opts.runtimes,
            opts.precisions,
            batch_sizes,
            workload.source.kind,
        )
    else:
        out = enumerate_candidates(
            grid.runtimes,
            grid.precisions,
            batch_sizes,
            workload.source.kind,
            frozenset(grid.left_out),
        )
    if opts.share is not None:  # a split's share: the rest are measured on other nodes
        out = [c for c in out if share_key(c) in opts.share]
    return out


def share_key(c: Candidate) -> str:
    """A candidate's id without its batch size: what a split shares out."""
    return c.label or c.variant.id


def plan_shares(ref: str | None, opts: RunOptions) -> tuple[list[str], str]:
    """What a run of `ref` would measure, as `share_key`s in order, and the baseline's
    (the reference variant; hand-written candidates without it: their first), for a
    split to share out. Loads the workload and its advice, builds nothing."""
    opts = checked(opts)
    workload = _with_flags(load_workload(ref, opts.data), opts)
    advice = advice_for(workload, opts.target)
    grid, batch_sizes, _ = _plan(workload, opts, advice, None)
    candidates = _candidates(workload, dataclasses.replace(opts, share=None), grid, batch_sizes)
    keys = list(dict.fromkeys(share_key(c) for c in candidates if c.status == "pending"))
    reference = reference_variant(workload.source.kind)
    baseline = next((share_key(c) for c in candidates if c.variant == reference), None)
    if baseline is None and keys:
        baseline = keys[0]
    if baseline is None:
        raise UserError(f"{ref}: no candidate to measure here")
    return keys, baseline


def _stored_settings(
    ref: str | None,
    workload: Workload,
    opts: RunOptions,
    grid: Grid,
    batch_sizes: list[int],
    threads: int,
) -> dict[str, Any]:
    """The run's settings as stored: a resume runs with these options again, the
    flags as given with the batch sizes, threads, margin and CI target this run
    settled on."""
    search = workload.spec.search
    settled = dataclasses.replace(
        opts,
        batch_sizes=batch_sizes,
        threads=threads,
        margin=search.margin,
        ci_target=search.ci_target,
    )
    return {
        "workload_ref": workload_ref(ref),
        "quality": {
            "metric": workload.spec.quality.metric,
            "max_drop": workload.spec.quality.max_drop,
        },
        "runtimes": grid.runtimes,
        "precisions": grid.precisions,
        **settled.to_settings(),
        "candidates_from": grid.candidates_from,
        "grid_from": grid.grid_from,
        "left_out": grid.left_out,
    }


def _job_base(workload: Workload, folder: RunFolder) -> JobBase:
    return JobBase(
        source=workload.source,
        data_path=str(folder.data),
        input_names=tuple(workload.inputs),
        artifacts_dir=str(folder.artifacts),
        # The quality gate, for build steps that tune to it (NNCF accuracy control).
        gate=output_gate(workload.spec.quality),
        # A grid leaves out a variant another one makes unnecessary; a hand-written
        # candidate is built as asked.
        skip_unneeded=not workload.spec.candidates,
    )


def run(
    ref: str | None,
    opts: RunOptions | None = None,
    reporter: Reporter | None = None,
    resume_record: dict[str, Any] | None = None,
) -> RunResult:
    """Build, check and measure every candidate; decide per batch size; store everything.

    With `resume_record` (see `api.resume`), the run continues under its own id:
    finished candidates and measured rounds are taken from the store, not redone.
    """
    opts = checked(opts or RunOptions())
    check_store(opts.store)  # a store that cannot be is said before the workload loads
    rep = reporter or NullReporter()
    t_start = time.perf_counter()
    rep.stage("loading workload")
    with warnings.catch_warnings():  # its notes, printed here, not as warnings too
        warnings.simplefilter("ignore", UserWarning)
        workload = load_workload(ref, opts.data)
    _, stand_in = reference_choice(workload.source.kind)
    if stand_in:  # said, and kept in the document's notes
        workload = dataclasses.replace(workload, notes=(*workload.notes, stand_in))
    for note in workload.notes:
        rep.stage(f"note: {note}")
    workload = _with_flags(workload, opts)
    advice = advice_for(workload, opts.target)
    grid, batch_sizes, threads = _plan(workload, opts, advice, resume_record)
    # Absolute: build steps change directory (quantizers litter the working one).
    store_path = Path(opts.store).resolve()
    run_id = new_run_id() if resume_record is None else resume_record["run_id"]

    def say_how_to_resume() -> None:
        rep.stage(
            f"interrupted: what finished is in the store; "
            f"`{resume_command(run_id, opts.store)}` finishes the run"
        )

    with lifecycle(store_path, run_id, resumable=True, on_interrupt=say_how_to_resume) as run:
        ctx, split = _open(ref, workload, opts, rep, run, grid, batch_sizes, threads, resume_record)
        if resume_record is not None:
            check_resumable(resume_record, workload, ctx.env, ctx.candidates, run.folder, split)
            run.resume()
        # Said first: a killed run cannot say later which id to resume.
        rep.stage(f"run {run_id}; if it is interrupted, `{resume_command(run_id, opts.store)}`")
        for vid, why in grid.left_out.items():
            rep.stage(f"left out {vid}: {why}")
        if resume_record is not None:
            restore(ctx.candidates, resume_record, run.store)
        rep.candidates(ctx.candidates)
        return _stages(ctx, run, t_start, advice.to_dict())


def _open(
    ref: str | None,
    workload: Workload,
    opts: RunOptions,
    rep: Reporter,
    run: Run,
    grid: Grid,
    batch_sizes: list[int],
    threads: int,
    resume_record: dict[str, Any] | None,
) -> tuple[RunContext, dict[str, np.ndarray]]:
    """The run's folder and data file, its stored settings and its candidates; and
    the data split (a resume checks it against the stored one)."""
    resuming, folder = resume_record is not None, run.folder
    folder.artifacts.mkdir(parents=True, exist_ok=resuming)
    split = split_data(workload, opts.quick)
    if not resuming or not folder.data.exists():
        np.savez(folder.data, **split)  # type: ignore[arg-type]
    settings = _stored_settings(ref, workload, opts, grid, batch_sizes, threads)
    env = environment.fingerprint()
    if not resuming:
        run.start(workload.origin, env, settings)
    ctx = RunContext(
        workload=workload,
        opts=opts,
        rep=rep,
        store=run.store,
        run_id=run.run_id,
        folder=folder,
        job_base=_job_base(workload, folder),
        candidates=_candidates(workload, opts, grid, batch_sizes),
        threads=threads,
        batch_sizes=batch_sizes,
        env=env,
        settings=settings,
        labels=split.get("quality_labels"),
    )
    return ctx, split


def _stages(ctx: RunContext, run: Run, t_start: float, advice: dict[str, Any] | None) -> RunResult:
    for c in ctx.candidates:
        ctx.save(c)
    # Workers of the first batch size load early, in the slots the builds leave
    # free; the trial engine gets them back through `preloads`.
    preloads = Preloads(LocalLauncher(ctx.folder.logs))
    early = EarlyLoads(lambda vid: early_loads(ctx, vid), preloads, ctx.opts.trial_timeout_s)
    reference = reference_variant(ctx.workload.source.kind)
    # How close to the limit: a figure beside the measurement, for real runtimes
    # with a graph to count. The GEMM peak's process imports torch beside the
    # builds; it times its GEMMs after them, before anything is timed.
    probe = None if ctx.workload.source.kind == "fake" else peak.start_probe(ctx)
    try:
        try:
            builds, ref, build_s = build_all(ctx, preloads, reference, early)
            t_efficiency = time.perf_counter()
            flops = None if probe is None else peak.model_flops(ctx)
            if flops is not None and probe is not None:
                ctx.env["peak_gflops"] = peak.measure_peaks(ctx, probe)
            efficiency_s = time.perf_counter() - t_efficiency
        finally:
            if probe is not None:
                probe.close()
        noise_before = environment.noise_snapshot()
        found = measure_all(ctx, preloads, ref)
    finally:
        preloads.close()  # any the engine did not ask for
    if flops is not None:
        peak.set_efficiency(ctx, flops, ctx.env["peak_gflops"])
    noise = {"before": noise_before, "after": environment.noise_snapshot()}
    doc = document(ctx, builds, build_s, ref, found, noise, t_start, efficiency_s)
    if advice is not None:
        # Per piece of advice: did the measurement confirm it?
        doc["advice"] = advising.confirmations(advice, doc)
    run.finish(doc)
    if ctx.opts.json_path:
        write_json(doc, Path(ctx.opts.json_path))
    return RunResult(ctx.run_id, doc, found.verdicts)
