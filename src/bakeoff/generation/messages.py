"""The messages of a generation worker (`generation.worker`), on the envelope in
`trials.jobs`.

`GenerateJob`: build a generative runtime's model file where it needs one (GGUF),
load it, time a first request, save its greedy tokens and perplexity figures for
the gate, then answer `Warmup`, `Measure` (generate requests: time per output
token, with each request's time to first token beside it), `Concurrent`, `Peak`
and `Exit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bakeoff.trials.jobs import MEASURING_COMMANDS, Command, Job, by_kind

WORKER = "bakeoff.generation.worker"


@dataclass(frozen=True)
class GenerateSpec:
    """One generative candidate, as its worker builds and loads it."""

    runtime: str  # a `bakeoff.generators.RUNTIMES` name
    precision: str  # fp32 | f16 | q8_0 | q4_k_m
    folder: str  # the causal-LM folder
    artifacts_dir: str  # where a built model file goes (shared by the run's candidates)
    inputs_path: str  # JSON: {"prompts": [[ids]], "text": [[ids]], "calibration": [[ids]]}
    outputs_path: str  # JSON the worker writes: greedy tokens and perplexity figures
    max_new_tokens: int
    threads: int
    candidate_id: str = ""
    method: str = ""  # awq | gptq for INT4 where the runtime offers them; "" plain


@dataclass(frozen=True, kw_only=True)
class GenerateJob(Job):
    """Build and load a generative runtime, time its first request, save the gate's
    figures, then answer commands (each timed call is one request)."""

    kind: ClassVar[str] = "generate"
    worker: ClassVar[str] = WORKER
    timed_load: ClassVar[bool] = True
    generate: GenerateSpec

    @property
    def threads(self) -> int:
        return self.generate.threads


@dataclass(frozen=True, kw_only=True)
class Concurrent(Command):
    """Generation under concurrency: `passes` passes over the prompts, `concurrency`
    requests submitted together at a time, through the runtime's own batching; reply:
    `Timed` with each request's time to first token (ns after its batch was
    submitted), the passes' wall time, and `extra` tokens per request (and `batch_ns`,
    each batch's wall time)."""

    kind: ClassVar[str] = "concurrent"
    concurrency: int
    passes: int = 1


@dataclass(frozen=True, kw_only=True)
class Arrivals(Command):
    """The server scenario: `requests` requests arriving as a Poisson process at
    `rate_per_s`, prompts drawn from the workload's (seeded), served through the
    engine's own scheduler (or, without one, a queue that forms static batches of
    up to `max_batch`); reply: `Timed` with each request's time to first token from
    its arrival, the schedule's wall time, and in `extra` each one's `tpot_ns`,
    `tokens`, `arrived_ns`, `last_ns` and `running_milli` (mean requests in the
    engine beside it, itself included, in thousandths)."""

    kind: ClassVar[str] = "arrivals"
    rate_per_s: float
    requests: int
    seed: int = 0
    max_batch: int = 8


JOBS: dict[str, type[Job]] = by_kind([GenerateJob])
COMMANDS: dict[str, type[Command]] = by_kind([*MEASURING_COMMANDS, Concurrent, Arrivals])
