"""The messages of a training worker (`training.worker`), on the envelope in
`trials.jobs`.

- `TrainJob`: build a training stack's trainer, time its first step, then answer
  `Warmup`, `Measure` (timed training steps), `Peak` and `Exit`.
- `TargetJob`: train one seed from its initial weights to the end of the recipe,
  evaluating as it goes; the reply carries the curve, when the target was
  reached, and the checkpoint's figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bakeoff.stacks.spec import TrainSpec
from bakeoff.trials.jobs import MEASURING_COMMANDS, Command, Job, by_kind

__all__ = ["COMMANDS", "JOBS", "TargetJob", "TrainJob", "TrainSpec"]

WORKER = "bakeoff.training.worker"


@dataclass(frozen=True, kw_only=True)
class TrainJob(Job):
    """Build the trainer, time its first step, then answer training commands."""

    kind: ClassVar[str] = "train"
    worker: ClassVar[str] = WORKER
    timed_load: ClassVar[bool] = True
    train: TrainSpec

    @property
    def threads(self) -> int:
        return self.train.threads


@dataclass(frozen=True, kw_only=True)
class TargetJob(Job):
    """Train `max_steps` steps from the seed's initial weights, evaluating every
    `eval_every`; with `checkpoint_path`, then save, step, load and step again."""

    kind: ClassVar[str] = "target"
    worker: ClassVar[str] = WORKER
    timed_load: ClassVar[bool] = True
    train: TrainSpec
    max_steps: int
    eval_every: int
    target: float  # the validation metric to reach
    checkpoint_path: str = ""

    @property
    def threads(self) -> int:
        return self.train.threads


JOBS: dict[str, type[Job]] = by_kind([TrainJob, TargetJob])
COMMANDS: dict[str, type[Command]] = by_kind(MEASURING_COMMANDS)
