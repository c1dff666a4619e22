"""`bakeoff run` on a text-generation workload: every generative runtime and
precision, checked against PyTorch's FP32 greedy text, timed per token.

1. The prompts and the held-out text are tokenized once (`GenerationWorkload`) and
   written to the run's folder: every runtime gets the same token ids.
2. The reference (PyTorch eager, FP32) runs in a worker of its own: its greedy
   tokens on every prompt and its perplexity on the held-out text.
3. Every other candidate is started through the trial engine: its worker builds
   what it needs (a GGUF file, quantized by llama.cpp itself), loads it, times its
   first request, and writes the same figures, which the generation gate judges
   (`bakeoff.judge.generation`) before anything is timed. Then requests are timed in
   randomized interleaved rounds, with racing and bootstrap CIs, as for any
   workload: the engine's figure is each request's time per output token (TPOT),
   each request's time to first token (TTFT) and tokens come beside it.
4. The concurrency sweep (`ConcurrencySweep`), once the TPOT race is over, on every
   candidate that passed the gate (raced-out ones too: a race on TPOT does not
   decide tokens/s under load): 2, 4 and 8 requests submitted together through the
   runtime's own batching, a pass over every prompt per round, candidates in
   randomized order round by round, each level warmed up first (a runtime that
   compiles per batch shape compiles there). Tokens/s and TTFT p99 per level;
   at 1, the TPOT rounds' own.
5. Verdicts: TPOT at batch 1, and tokens/s at each concurrency (the headline at the
   highest), by the same judge as every other verdict.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff import environment, generators, runtime_envs
from bakeoff.errors import UserError, did_you_mean
from bakeoff.generation.candidate import REFERENCE, ConcurrentRound, GenCandidate
from bakeoff.generation.document import (
    candidate_document,
    concurrency_verdict,
    spread,
    tpot_verdict,
)
from bakeoff.generation.messages import Concurrent, GenerateJob, GenerateSpec
from bakeoff.generation.options import GenerateOptions
from bakeoff.generation.reference import GenReference, reference_outputs
from bakeoff.generation.resume import FINAL, check_resumable, model_digest, restore
from bakeoff.generation.server_scenario import ServerSweep, server_verdict
from bakeoff.judge import generation as gen
from bakeoff.lifecycle import FinishedRun, Run, StoreEvents, lifecycle, new_run_id
from bakeoff.loader import workload_ref
from bakeoff.paths import resume_command
from bakeoff.store import check_store
from bakeoff.trials.engine import Checked, Engine, run_trials
from bakeoff.trials.jobs import Job, Timed
from bakeoff.trials.launcher import LocalLauncher, Worker, WorkerFailed
from bakeoff.trials.settings import TrialSettings
from bakeoff.workload import GenerationWorkload

SCHEMA_VERSION = 1
# Every runtime, precision and method the generative bake-off names, the reference
# first. INT4's methods beside plain round-to-nearest, calibrated on the workload's
# calibration text: AWQ and GPTQ by NNCF for OpenVINO GenAI, GPTQ by ONNX Runtime's
# quantizer for ONNX Runtime GenAI.
GRID: tuple[tuple[str, str] | tuple[str, str, str], ...] = (
    REFERENCE,
    ("torch-compile", "fp32"),
    ("onnxruntime-genai", "fp32"),
    ("onnxruntime-genai", "int4"),
    ("onnxruntime-genai", "int4", "gptq"),
    ("openvino-genai", "fp32"),
    ("openvino-genai", "int8"),
    ("openvino-genai", "int4"),
    ("openvino-genai", "int4", "awq"),
    ("openvino-genai", "int4", "gptq"),
    ("llama-cpp", "f16"),
    ("llama-cpp", "q8_0"),
    ("llama-cpp", "q4_k_m"),
    ("mlx", "fp32"),
    ("mlx", "bf16"),
    ("mlx", "int8"),
    ("mlx", "int4"),
    ("vllm", "fp32"),  # in an environment of its own (bakeoff.runtime_envs)
    ("vllm", "bf16"),
)
GGUF_ARCHITECTURES = ("GPT2LMHeadModel",)


# a finished run of this kind: its id, document and exit code
GenerateResult = FinishedRun


class _Events(StoreEvents):
    """The engine's progress to the terminal; timed requests to the store, and their
    TTFT and tokens to the candidate; each candidate to the store as it changes (what
    a resume reads, and `bakeoff show` of an unfinished run)."""

    def changed(self, entrant: Any | None) -> None:
        if isinstance(entrant, GenCandidate):
            self.store.put_candidate(self.run_id, candidate_document(entrant))

    def figures(self, entrant: Any, kind: str, extra: dict[str, list[int]]) -> None:
        if kind == "measure" and isinstance(entrant, GenCandidate):
            entrant.ttft_ns.append(list(extra["ttft_ns"]))
            entrant.tokens.append(list(extra["tokens"]))


# Rounds of the sweep at each concurrency: at least this many (a CI over rounds needs
# a few), and more up to `ConcurrencySweep.rounds` while its share of the budget lasts.
MIN_SWEEP_ROUNDS = 3


class ConcurrencySweep:
    """The engine's `after_race`: tokens/s and TTFT with several requests submitted
    together, at each concurrency in turn, every candidate in randomized order round
    by round (as the TPOT rounds are), after one untimed pass each. Each concurrency
    gets MIN_SWEEP_ROUNDS rounds, then more up to `rounds` while its share of
    `budget_s` lasts (a large model's passes are long)."""

    def __init__(
        self,
        levels: tuple[int, ...],
        rounds: int,
        budget_s: float,
        timeout_s: float,
        seed: int,
        events: _Events,
    ) -> None:
        self.levels, self.rounds, self.timeout_s = levels, rounds, timeout_s
        self.budget_s, self.seed, self.events = budget_s, seed, events
        self.rounds_done: dict[int, int] = {}

    def _ask(self, c: GenCandidate, worker: Worker, level: int, lost: set[str]) -> Timed | None:
        try:
            return Timed.from_json(worker.request(Concurrent(concurrency=level), self.timeout_s))
        except WorkerFailed as exc:
            lost.add(c.id)
            c.concurrency_lost = f"its worker was lost at {level} requests at once: {exc}"
            self.events.note(f"{c.id}: {c.concurrency_lost}", c)
            return None

    def __call__(self, lanes: Sequence[tuple[GenCandidate, Worker]], /) -> set[str]:
        lost: set[str] = set()
        for level in self.levels:
            self.events.note(
                f"concurrency {level}: warming up {len(lanes) - len(lost)} candidates", None
            )
            for c, worker in lanes:
                if c.id not in lost:
                    self._ask(c, worker, level, lost)
            started = time.perf_counter()
            share = self.budget_s / len(self.levels)
            for r in range(self.rounds):
                spent = time.perf_counter() - started
                if r >= MIN_SWEEP_ROUNDS and spent + spent / r > share:
                    break
                order = [lane for lane in lanes if lane[0].id not in lost]
                np.random.default_rng([self.seed, level, r]).shuffle(order)
                for c, worker in order:
                    timed = self._ask(c, worker, level, lost)
                    if timed is None:
                        continue
                    tokens = timed.extra["tokens"]
                    c.concurrency.setdefault(level, []).append(
                        ConcurrentRound(timed.latency_ns, tokens, timed.block_ns)
                    )
                    self.events.timed(
                        c, r, f"concurrency-{level}", timed.latency_ns, timed.block_ns, 0
                    )
                self.rounds_done[level] = r + 1
                self.events.note(
                    f"concurrency {level}: round {r + 1} done ({MIN_SWEEP_ROUNDS} to "
                    f"{self.rounds} rounds, budget {share:.0f} s)",
                    None,
                )
        return lost


class GenerationGate:
    """A candidate's greedy tokens and perplexity against the reference's."""

    def __init__(self, reference: GenReference, workload: GenerationWorkload) -> None:
        self.reference = reference
        self.reference_ppl = gen.perplexity(reference.nll, reference.predicted)
        self.workload = workload

    def judge(self, outputs: dict[str, Any]) -> gen.GenerationQuality:
        w = self.workload
        # On the prompts the reference has (it may have left one out: `reference`).
        reference_tokens, candidate_tokens = self.reference.compared(outputs["tokens"])
        return gen.judge(
            reference_tokens,
            candidate_tokens,
            self.reference_ppl,
            gen.perplexity(outputs["nll"], outputs["predicted"]),
            compared_tokens=w.compared_tokens,
            min_agreement=w.min_token_agreement,
            max_drop=w.max_drop,
        )

    def check(self, entrant: GenCandidate, job: Job, record: bool) -> Checked:
        assert isinstance(job, GenerateJob)
        outputs = json.loads(Path(job.generate.outputs_path).read_text())
        quality = self.judge(outputs)
        if record:
            entrant.quality = quality
        return Checked(quality.passed, quality.describe())


def _settings(opts: GenerateOptions, threads: int, prompts: int) -> TrialSettings:
    return TrialSettings(
        threads=threads,
        trial_timeout_s=opts.trial_timeout_s,
        warmup_s=0.5 if opts.quick else 1.0,
        warmup_calls=prompts,  # every prompt once before anything is kept
        slice_s=0.5 if opts.quick else 1.0,  # at least a pass over the prompts
        settle_s=0.0,
        min_rounds=5 if opts.quick else 8,
        max_rounds=15 if opts.quick else 40,
        budget_s=opts.budget_s if opts.budget_s is not None else (30.0 if opts.quick else 90.0),
        seed=0,
        objective="latency",  # time per output token: lower is better
        # Whole passes over the prompts in every round: the same mix of short and
        # long prompts in each, for every candidate, so rounds pair fairly.
        calls_multiple=prompts,
    )


def _grid(opts: GenerateOptions) -> list[GenCandidate]:
    grid = [GenCandidate(*g) for g in GRID]
    if opts.runtimes:
        known = {g[0] for g in GRID}
        unknown = [r for r in opts.runtimes if r not in known]
        if unknown:
            raise UserError(
                f"--runtimes: no generative runtime {', '.join(map(repr, unknown))}"
                f"{did_you_mean(unknown[0], known)} (have: {', '.join(sorted(known))})"
            )
        grid = [c for c in grid if c.runtime in opts.runtimes]
    if opts.precisions:
        grid = [c for c in grid if c.precision in opts.precisions]
    if not grid:
        raise UserError("--runtimes/--precisions leave no generative candidate")
    return grid


def _unavailable(c: GenCandidate, w: GenerationWorkload) -> str | None:
    why = generators.availability(c.runtime)
    if why:
        return why
    if c.runtime == "llama-cpp" and w.architecture not in GGUF_ARCHITECTURES:
        return f"bakeoff writes GGUF for {', '.join(GGUF_ARCHITECTURES)} only, not {w.architecture}"
    return None


def run_generation(
    w: GenerationWorkload,
    opts: GenerateOptions,
    say: Callable[[str], None] = lambda _: None,
    resume_record: dict[str, Any] | None = None,
) -> GenerateResult:
    """Build, check and time every generative candidate; decide TPOT at batch 1.

    With `resume_record` (see `api.resume_generation`), the run continues under its
    own id with what it had finished (`generation.resume`)."""
    t_start = time.perf_counter()
    if opts.budget_s is not None and opts.budget_s <= 0:
        raise UserError(f"--budget: seconds above 0, not {opts.budget_s:g}")
    grid = _grid(opts)
    check_store(opts.store)  # before the run's folder is made beside it
    threads = opts.threads or environment.default_threads()
    env = {**environment.fingerprint(), "threads": threads}
    run_id = new_run_id("gen-") if resume_record is None else resume_record["run_id"]
    store_path = Path(opts.store).resolve()
    resume = resume_command(run_id, opts.store)

    def say_how_to_resume() -> None:
        say(f"interrupted: what finished is in the store; `{resume}` finishes the run")

    inputs = {"prompts": w.prompts, "text": w.text, "calibration": w.calibration}
    with lifecycle(store_path, run_id, resumable=True, on_interrupt=say_how_to_resume) as run:
        if resume_record is None:
            asked = {
                "kind": "generate",
                "workload": w.origin,
                "workload_ref": workload_ref(w.origin),  # what a resume loads again
                "quick": opts.quick,
                "scenario": opts.scenario,
                "options": opts.to_settings(),
                "model_digest": model_digest(w),
            }
            run.start(w.name, env, {**asked, "threads": threads})
        else:
            check_resumable(resume_record, w, env, inputs, run.folder.path)
            run.resume()
        # Said first: a killed run cannot say later which id to resume.
        say(
            f"run {run_id}: {w.name}, {len(w.prompts)} prompts, {w.max_new_tokens} new "
            f"tokens each, greedy; {threads} thread(s); if it is interrupted, `{resume}`"
        )
        doc = _measure(w, grid, opts, threads, env, run, inputs, resume_record, say)
        doc["timing_s"]["total"] = round(time.perf_counter() - t_start, 3)
        for c in doc["candidates"]:
            run.store.put_candidate(run_id, c)
        run.finish(doc)
        return GenerateResult(run_id, doc)


def _server_sweep(opts: GenerateOptions, events: _Events, folder: Path) -> ServerSweep:
    quick = opts.quick
    return ServerSweep(
        opts.slo,
        requests=24 if quick else 64,
        steps=3 if quick else 5,
        repeats=2 if quick else 3,
        timeout_s=opts.trial_timeout_s,
        note=lambda text: events.note(text, None),
        # each engine's search as long as the TPOT rounds' budget (--budget)
        budget_s=opts.budget_s if opts.budget_s is not None else (30.0 if quick else 90.0),
        target_path=folder / "server_target.json",  # kept for a resume
        changed=events.changed,
    )


def _python(runtime: str) -> str | None:
    """The interpreter of a runtime with an environment of its own; None: bakeoff's."""
    python = runtime_envs.python_for(runtime)
    return None if python is None else str(python)


def _spec(
    w: GenerationWorkload, c: GenCandidate, folder: Path, threads: int, name: str
) -> GenerateSpec:
    return GenerateSpec(
        runtime=c.runtime,
        precision=c.precision,
        method=c.method,
        folder=str(w.folder),
        artifacts_dir=str(folder / "artifacts" / c.runtime),
        inputs_path=str(folder / "inputs.json"),
        outputs_path=str(folder / "outputs" / f"{name}.json"),
        max_new_tokens=w.max_new_tokens,
        threads=threads,
        candidate_id=c.id,
    )


def _measure(
    w: GenerationWorkload,
    candidates: list[GenCandidate],
    opts: GenerateOptions,
    threads: int,
    env: dict[str, Any],
    run: Run,
    inputs: dict[str, Any],
    resume_record: dict[str, Any] | None,
    say: Callable[[str], None],
) -> dict[str, Any]:
    run_id, folder, store = run.run_id, run.folder.path, run.store
    (folder / "outputs").mkdir(parents=True, exist_ok=True)
    (folder / "inputs.json").write_text(json.dumps(inputs))
    launcher = LocalLauncher(folder / "logs")
    t_ref = time.perf_counter()
    say("reference: torch-fp32's greedy tokens and perplexity")
    reference = reference_outputs(
        _spec(w, GenCandidate(*REFERENCE), folder, threads, "reference"),
        w.prompts,
        w.text,
        launcher,
        opts.trial_timeout_s,
        say,
    )
    reference_s = time.perf_counter() - t_ref
    gate = GenerationGate(reference, w)
    for c in candidates:
        why = _unavailable(c, w)
        if why:
            c.set_status("unavailable", why)
            say(f"{c.id}: unavailable: {why}")
    if resume_record is not None:
        kept = restore(candidates, resume_record, store)
        whole = [c.id for c in candidates if c.status in FINAL]
        after = (
            "the server scenario keeps the searches that finished"
            if opts.scenario == "server"
            else "the concurrency sweep starts again"
        )
        say(
            f"resuming: {kept} timed rounds kept"
            + (f"; {', '.join(whole)} kept as they ended" if whole else "")
            + f"; {after}"
        )
        store.drop_trials(run_id, "concurrency-")  # its rounds are measured again whole
    for c in candidates:
        store.put_candidate(run_id, candidate_document(c))
    pending = [c for c in candidates if c.status == "pending"]
    jobs: dict[str, Job] = {
        c.id: GenerateJob(generate=_spec(w, c, folder, threads, c.id), python=_python(c.runtime))
        for c in pending
    }
    settings = _settings(opts, threads, len(w.prompts))
    say(f"measuring time per output token: {len(pending)} candidates in interleaved rounds")
    t_trials = time.perf_counter()
    events = _Events(say, store, run_id)
    sweep = ConcurrencySweep(
        opts.concurrency,
        MIN_SWEEP_ROUNDS if opts.quick else 6,
        settings.budget_s,
        opts.trial_timeout_s,
        settings.seed,
        events,
    )
    server = _server_sweep(opts, events, folder) if opts.scenario == "server" else None
    outcome = run_trials(
        pending,
        jobs,
        Engine(
            gate,
            launcher,
            settings,
            events,
            after_race=server or (sweep if opts.concurrency else None),
            baselines=frozenset({GenCandidate(*REFERENCE).id}),
        ),
    )
    trials_s = time.perf_counter() - t_trials
    verdict = tpot_verdict(candidates, settings)
    timing = {"reference": reference_s, "trials": trials_s, **outcome.phases}
    verdicts: dict[str, Any] = {"tpot_batch_1": verdict}
    if server is not None:
        verdicts["server_rate"] = server_verdict(candidates, server.target)
    else:
        verdicts["tokens_per_s_concurrency"] = concurrency_verdict(
            candidates, sweep.rounds_done, settings, asked=bool(opts.concurrency)
        )
    return _document(w, env, run_id, gate, reference, candidates, verdicts, timing)


def _document(
    w: GenerationWorkload,
    env: dict[str, Any],
    run_id: str,
    gate: GenerationGate,
    reference: GenReference,
    candidates: list[GenCandidate],
    verdicts: dict[str, Any],
    timing: dict[str, float],
) -> dict[str, Any]:
    """The run's document; `timing` holds the reference's seconds, then the trials'
    whole (loads and gate, warm-up, rounds), then each part."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "kind": "generate",
        "workload": {
            "name": w.name,
            "origin": w.origin,
            "folder": str(w.folder),
            "architecture": w.architecture,
            "prompts": len(w.prompts),
            "prompt_tokens": spread([len(p) for p in w.prompts]),
            "max_new_tokens": w.max_new_tokens,
            "perplexity_tokens": sum(len(t) - 1 for t in w.text),
            # what AWQ and GPTQ calibrate on: data.calibration_text, else the prompts
            "calibration": {"source": w.calibration_source, "passages": len(w.calibration)},
            "decoding": "greedy",
        },
        "environment": env,
        "reference": {
            "id": GenCandidate(*REFERENCE).id,
            "perplexity": gate.reference_ppl,
            # prompts its worker died on: no candidate is quality-checked on them
            "prompts_left_out": reference.record(w.prompts),
        },
        "candidates": [candidate_document(c) for c in candidates],
        # One list, as every kind's document has: the TPOT verdict, then tokens/s under
        # concurrency. `verdict` (keyed by objective) is kept for one version.
        "verdicts": list(verdicts.values()),
        "verdict": verdicts,
        "timing_s": {k: round(v, 3) for k, v in timing.items()},
    }
