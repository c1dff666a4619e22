"""Typed messages to a worker process: the job it starts with, the commands after it.

The orchestrator builds these dataclasses and nothing else; `to_json` gives the
JSON that crosses the socket pair (never pickle: a worker must not run what it
is sent), and the worker reads it back with `job_from_json` or
`command_from_json`, which refuse an unknown kind, a missing, unknown or
mistyped field with a `JobError` that names it. Both ends are ours and a resumed
run starts fresh workers, so the format carries no version. The checks are a
few dozen lines here rather than pydantic (which the workload format uses)
because every worker process imports this module before it loads anything, and
pydantic's validators would add tens of milliseconds to each of them.

Jobs (the first message, ``"kind"`` says which):
- `BuildJob`: run a backend's build step; the reply carries the artifact.
- `ReferenceJob`: run a variant on the quality inputs and save its outputs.
- `ColdStartJob`: load a variant and time its first call, nothing else.
- `LoadJob`: load a variant, time its first call, save its outputs on the
  quality inputs (the variant timed is the one checked: docs/method.md rule 12), then
  answer commands until `Exit`.
- `TrainJob`: build a training stack's trainer, time its first step, then answer
  `Warmup`, `Measure` (timed training steps), `Peak` and `Exit`.
- `TargetJob`: train one seed from its initial weights to the end of the recipe,
  evaluating as it goes; the reply carries the curve, when the target was
  reached, and the checkpoint's figures.
- `GenerateJob`: build a generative runtime's model file where it needs one
  (GGUF), load it, time a first request, save its greedy tokens and perplexity
  figures for the gate, then answer `Warmup`, `Measure` (generate requests: time
  per output token, with each request's time to first token beside it), `Peak`
  and `Exit`.

Commands (to a `LoadJob`'s worker): `Warmup`, `Measure` (answered with a
`Timed`), `Server`, `Offline`, `Rebatch` (go on at another batch size, the same
process), `Peak` (the memory figure of the batch size it is at), `Exit`.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from bakeoff.backends import Variant
from bakeoff.source import ModelSource
from bakeoff.trials.fields_json import JobError, describe, encode, from_fields

KIND = "kind"  # the field of a message that says which class it is


@dataclass(frozen=True)
class JobBase:
    """What every job of one run shares: the model, the run's data and the quality gate."""

    source: ModelSource
    data_path: str  # the run's npz: calib/, quality/, quality_alt/ and pool/ splits
    input_names: tuple[str, ...]
    artifacts_dir: str  # shared by every build of a run; steps cache their outputs here
    # The quality gate, for build steps that tune to it (NNCF accuracy control).
    metric: str = "cosine"
    max_drop: float = 0.01
    # A grid leaves out a variant another one makes unnecessary; a hand-written
    # candidate is built as asked.
    skip_unneeded: bool = True


@dataclass(frozen=True)
class LoadSpec:
    """One built variant at one batch size, as a worker loads it."""

    variant: Variant
    artifact: dict[str, Any]  # what the backend's build returned
    batch_size: int
    threads: int  # per stream
    options: dict[str, Any] = field(default_factory=dict)  # the candidate's own
    candidate_id: str = ""
    # Concurrent inference streams the offline scenario will run.
    streams: int = 1
    # The batch size the quality outputs are computed at (None: `batch_size`). A
    # worker that is timed at several batch sizes checks quality once, at the
    # largest; its first call, the cold one, is still at `batch_size`.
    quality_batch_size: int | None = None


class _Message:
    """to_json / from_json for the dataclasses below, tagged with their `kind`."""

    kind: ClassVar[str]
    what: ClassVar[str]  # "job" or "command", for error messages

    def to_json(self) -> dict[str, Any]:
        return {KIND: self.kind, **encode(self)}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        where = f"{cls.what} {cls.kind!r}"
        if not isinstance(data, dict):
            raise JobError(f"{where}: a message must be a JSON object, not {describe(data)}")
        if data.get(KIND) != cls.kind:
            raise JobError(f"{where}: the message's {KIND} is {data.get(KIND)!r}")
        try:
            return from_fields(cls, data, "", skip=(KIND,))
        except JobError as exc:
            raise JobError(f"{where}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class _Job(_Message):
    what: ClassVar[str] = "job"
    # CPUs the worker pins itself to before anything else (None: the parent's set).
    cpus: tuple[int, ...] | None = None
    # Processes torch.compile (inductor) compiles its kernels in (None: its default,
    # one per core). A load beside others gets 1: its g++ processes would take the
    # cores the others use, and the kernels it makes are the same either way.
    compile_threads: int | None = None
    # A further process of a close call, whose load and first call are not figures
    # of the run: it starts from a copy of the compile caches of its candidate's
    # first worker (the kernels that worker compiled), not from empty ones, so a
    # torch.compile candidate does not compile its model again (tens of seconds of
    # CPU on MiniLM) to run the same kernels. The launcher does the copying.
    reuse_compiles: bool = False


@dataclass(frozen=True, kw_only=True)
class BuildJob(_Job):
    """Run the variant's build steps; the reply carries the artifact and build_s."""

    kind: ClassVar[str] = "build"
    base: JobBase
    variant: Variant
    threads: int


@dataclass(frozen=True, kw_only=True)
class _LoadsVariant(_Job):
    """A job whose worker loads a built variant."""

    base: JobBase
    load: LoadSpec

    @property
    def threads(self) -> int:
        """The threads its worker runs with (per stream)."""
        return self.load.threads


@dataclass(frozen=True, kw_only=True)
class ReferenceJob(_LoadsVariant):
    """Load the variant, save its outputs on the quality inputs; reply: its settings."""

    kind: ClassVar[str] = "reference"
    outputs_path: str  # .npy; the second shape's outputs go beside it (.alt.npy)


@dataclass(frozen=True, kw_only=True)
class ColdStartJob(_LoadsVariant):
    """Load the variant and time one call in a fresh process, nothing else."""

    kind: ClassVar[str] = "coldstart"


@dataclass(frozen=True, kw_only=True)
class LoadJob(_LoadsVariant):
    """Load, time the first call, save the quality outputs, then answer commands."""

    kind: ClassVar[str] = "load"
    outputs_path: str  # .npy; the second shape's outputs go beside it (.alt.npy)


@dataclass(frozen=True)
class TrainSpec:
    """One training stack on the run's recipe, as a worker builds it."""

    stack: str
    factory: str  # "module:function" that builds the untrained model
    init_path: str  # the seed's initial weights (safetensors), shared by every stack
    data_path: str  # npz: x_train, y_train, x_val, y_val
    seed: int  # the data order
    batch_size: int  # the global batch
    lr: float
    threads: int
    candidate_id: str = ""
    optimizer: str = "adam"  # adam | adamw | sgd, its state in FP32
    factory_dir: str = ""  # put first on sys.path to import the factory's module
    processes: int = 1  # above 1: ranks under torchrun, `threads` split among them
    # A Ray cluster's address: the ranks (`processes` of them) run one a node there,
    # through Ray Train's TorchTrainer, each with its node's own cores, not here
    # under torchrun (`bakeoff.trials.train_nodes`); Ray Train's files go under
    # `cluster_tmp`.
    cluster_address: str = ""
    cluster_tmp: str = ""
    # The lora stack's adapters (peft): the modules that get them, their rank and
    # alpha, and the modules trained in full beside them (a head).
    lora_targets: tuple[str, ...] = ()
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_train: tuple[str, ...] = ()
    # The learning-rate schedule (`bakeoff.stacks.schedule`): its kind, warm-up
    # updates, and the recipe's steps it runs over.
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int = 0


@dataclass(frozen=True, kw_only=True)
class TrainJob(_Job):
    """Build the trainer, time its first step, then answer training commands."""

    kind: ClassVar[str] = "train"
    train: TrainSpec

    @property
    def threads(self) -> int:
        return self.train.threads


@dataclass(frozen=True, kw_only=True)
class TargetJob(_Job):
    """Train `max_steps` steps from the seed's initial weights, evaluating every
    `eval_every`; with `checkpoint_path`, then save, step, load and step again."""

    kind: ClassVar[str] = "target"
    train: TrainSpec
    max_steps: int
    eval_every: int
    target: float  # the validation metric to reach
    checkpoint_path: str = ""

    @property
    def threads(self) -> int:
        return self.train.threads


@dataclass(frozen=True)
class GenerateSpec:
    """One generative candidate, as its worker builds and loads it."""

    runtime: str  # a `bakeoff.generators.RUNTIMES` name
    precision: str  # fp32 | f16 | q8_0 | q4_k_m
    folder: str  # the causal-LM folder
    artifacts_dir: str  # where a built model file goes (shared by the run's candidates)
    inputs_path: str  # JSON: {"prompts": [[ids]], "text": [[ids]]}
    outputs_path: str  # JSON the worker writes: greedy tokens and perplexity figures
    max_new_tokens: int
    threads: int
    candidate_id: str = ""


@dataclass(frozen=True, kw_only=True)
class GenerateJob(_Job):
    """Build and load a generative runtime, time its first request, save the gate's
    figures, then answer commands (each timed call is one request)."""

    kind: ClassVar[str] = "generate"
    generate: GenerateSpec

    @property
    def threads(self) -> int:
        return self.generate.threads


@dataclass(frozen=True, kw_only=True)
class _Command(_Message):
    what: ClassVar[str] = "command"


@dataclass(frozen=True, kw_only=True)
class Warmup(_Command):
    """Run for at least `seconds` and `min_calls`, at most `max_calls`; reply with
    each call's ns."""

    kind: ClassVar[str] = "warmup"
    seconds: float
    min_calls: int
    max_calls: int = 10_000


@dataclass(frozen=True, kw_only=True)
class Measure(_Command):
    """`settle` untimed calls, then a block of `calls` timed ones; reply: `Timed`."""

    kind: ClassVar[str] = "measure"
    calls: int
    settle: int = 0


@dataclass(frozen=True, kw_only=True)
class Server(_Command):
    """The server scenario: the highest Poisson arrival rate within the p99 bound."""

    kind: ClassVar[str] = "server"
    single_stream_s: float
    bound_ms: float
    duration_s: float
    min_queries: int
    steps: int
    out_dir: str
    seed: int


@dataclass(frozen=True, kw_only=True)
class Offline(_Command):
    """One offline trial with `concurrency` streams."""

    kind: ClassVar[str] = "offline"
    concurrency: int
    expected_sps: float
    duration_s: float
    out_dir: str
    seed: int


@dataclass(frozen=True, kw_only=True)
class Rebatch(_Command):
    """Go on at `batch_size` in the same process: a new pool of batches, a timed first
    call at the new shape (a runtime that compiles per shape, such as torch.compile,
    compiles there), the quality outputs copied to `outputs_path` (the gate reads
    them there), and the memory peak started afresh. Refused by a runtime that fixes
    the batch shape when it loads (`backends.any_batch_size`)."""

    kind: ClassVar[str] = "rebatch"
    batch_size: int
    outputs_path: str


@dataclass(frozen=True, kw_only=True)
class Concurrent(_Command):
    """Generation under concurrency: `passes` passes over the prompts, `concurrency`
    requests submitted together at a time, through the runtime's own batching; reply:
    `Timed` with each request's time to first token (ns after its batch was
    submitted), the passes' wall time, and `extra` tokens per request (and `batch_ns`,
    each batch's wall time)."""

    kind: ClassVar[str] = "concurrent"
    concurrency: int
    passes: int = 1


@dataclass(frozen=True, kw_only=True)
class Peak(_Command):
    """Reply with the peak resident memory at the current batch size, and go on."""

    kind: ClassVar[str] = "peak"


@dataclass(frozen=True, kw_only=True)
class Exit(_Command):
    """Reply with the peak resident memory and end."""

    kind: ClassVar[str] = "exit"


Job = BuildJob | ReferenceJob | ColdStartJob | LoadJob | TrainJob | TargetJob | GenerateJob
# The jobs of workers the trial engine times in rounds.
MeasuredJob = LoadJob | TrainJob | GenerateJob
Command = Warmup | Measure | Server | Offline | Rebatch | Concurrent | Peak | Exit

JOBS: dict[str, type[Job]] = {
    c.kind: c
    for c in (BuildJob, ReferenceJob, ColdStartJob, LoadJob, TrainJob, TargetJob, GenerateJob)
}
COMMANDS: dict[str, type[Command]] = {
    c.kind: c for c in (Warmup, Measure, Server, Offline, Rebatch, Concurrent, Peak, Exit)
}


def _dispatch(table: dict[str, type[Any]], what: str, data: Any) -> Any:
    if not isinstance(data, dict):
        raise JobError(f"a {what} must be a JSON object, not {describe(data)}")
    if KIND not in data:
        raise JobError(f"a {what} without a {KIND!r} field (known: {', '.join(sorted(table))})")
    cls = table.get(data[KIND]) if isinstance(data[KIND], str) else None
    if cls is None:
        known = ", ".join(sorted(table))
        raise JobError(f"unknown {what} {KIND} {data[KIND]!r} (known: {known})")
    return cls.from_json(data)


def job_from_json(data: Any) -> Job:
    """The job a worker was sent as its first message."""
    return typing.cast(Job, _dispatch(JOBS, "job", data))


def command_from_json(data: Any) -> Command:
    """A command sent to a loaded worker."""
    return typing.cast(Command, _dispatch(COMMANDS, "command", data))


@dataclass(frozen=True)
class Timed:
    """The answer to `Measure`: each timed call's ns, and the whole block's; `extra`,
    per-call figures beside the timed one (a generate request's time to first token
    and tokens), by name, one value per call."""

    latency_ns: list[int]
    block_ns: int
    extra: dict[str, list[int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """From a worker's reply (its "ok" is the channel's, not part of this)."""
        if not isinstance(data, dict):
            raise JobError(f"a measure reply must be a JSON object, not {describe(data)}")
        try:
            return from_fields(cls, data, "", skip=("ok",))
        except JobError as exc:
            raise JobError(f"measure reply: {exc}") from None
