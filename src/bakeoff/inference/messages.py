"""The messages of an inference worker (`inference.worker`), on the envelope in
`trials.jobs`.

Jobs (the first message, ``"kind"`` says which):
- `BuildJob`: run a backend's build step; the reply carries the artifact.
- `ReferenceJob`: run a variant on the quality inputs and save its outputs.
- `ColdStartJob`: load a variant and time its first call, nothing else.
- `LoadJob`: load a variant, time its first call, save its outputs on the
  quality inputs (the variant timed is the one checked: docs/method.md rule 12), then
  answer commands until `Exit`.

Commands (to a `LoadJob`'s worker): `Warmup`, `Measure` (answered with a
`Timed`), `Server`, `Offline`, `Rebatch` (go on at another batch size, the same
process), `Peak` (the memory figure of the batch size it is at), `Exit`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from bakeoff.backends import Variant
from bakeoff.judge.outputs import OutputGate, default_gate
from bakeoff.source import ModelSource
from bakeoff.trials.jobs import MEASURING_COMMANDS, Command, Job, by_kind

WORKER = "bakeoff.inference.worker"


@dataclass(frozen=True)
class JobBase:
    """What every job of one run shares: the model, the run's data and the quality gate."""

    source: ModelSource
    data_path: str  # the run's npz: calib/, quality/, quality_alt/ and pool/ splits
    input_names: tuple[str, ...]
    artifacts_dir: str  # shared by every build of a run; steps cache their outputs here
    # The quality gate, for build steps that tune to it (NNCF accuracy control).
    gate: OutputGate = field(default_factory=default_gate)
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


@dataclass(frozen=True, kw_only=True)
class BuildJob(Job):
    """Run the variant's build steps; the reply carries the artifact and build_s."""

    kind: ClassVar[str] = "build"
    worker: ClassVar[str] = WORKER
    base: JobBase
    variant: Variant
    build_threads: int

    @property
    def threads(self) -> int:
        return self.build_threads


@dataclass(frozen=True, kw_only=True)
class _LoadsVariant(Job):
    """A job whose worker loads a built variant."""

    worker: ClassVar[str] = WORKER
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
    timed_load: ClassVar[bool] = True


@dataclass(frozen=True, kw_only=True)
class LoadJob(_LoadsVariant):
    """Load, time the first call, save the quality outputs, then answer commands."""

    kind: ClassVar[str] = "load"
    timed_load: ClassVar[bool] = True
    outputs_path: str  # .npy; the second shape's outputs go beside it (.alt.npy)

    def compiles_of(self) -> str:
        """Its candidate's build, at whatever batch size (one worker is timed at
        several in turn)."""
        return self.load.candidate_id.removesuffix(f"-b{self.load.batch_size}")


@dataclass(frozen=True, kw_only=True)
class Server(Command):
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
class Offline(Command):
    """One offline trial with `concurrency` streams."""

    kind: ClassVar[str] = "offline"
    concurrency: int
    expected_sps: float
    duration_s: float
    out_dir: str
    seed: int


@dataclass(frozen=True, kw_only=True)
class Rebatch(Command):
    """Go on at `batch_size` in the same process: a new pool of batches, a timed first
    call at the new shape (a runtime that compiles per shape, such as torch.compile,
    compiles there), the quality outputs copied to `outputs_path` (the gate reads
    them there), and the memory peak started afresh. Refused by a runtime that fixes
    the batch shape when it loads (`backends.any_batch_size`)."""

    kind: ClassVar[str] = "rebatch"
    batch_size: int
    outputs_path: str


JOBS: dict[str, type[Job]] = by_kind([BuildJob, ReferenceJob, ColdStartJob, LoadJob])
COMMANDS: dict[str, type[Command]] = by_kind([*MEASURING_COMMANDS, Server, Offline, Rebatch])
