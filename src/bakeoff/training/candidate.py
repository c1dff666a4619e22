"""A training candidate: one stack on the run's recipe, as the trial engine sees it
(`bakeoff.trials.entrant.Entrant`) plus what its seeds found."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from bakeoff.candidate_core import CandidateCore

# `rejected` is the engine's word for a worker its gate refused (here: a first loss
# that is not the reference's); the document says `flagged`.
STATUSES = ("pending", "ok", "rejected", "failed", "unavailable", "diverged", "flagged")


@dataclass
class TrainCandidate(CandidateCore):
    """One stack on the run's recipe, and what its seeds found."""

    STATUSES: ClassVar[tuple[str, ...]] = STATUSES  # its own: diverged and flagged too

    stack: str
    batch_size: int  # the global batch: samples per timed step
    seeds: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: dict[str, Any] | None = None
    processes: int = 1
    # Above 0: one rank on each of this many nodes of a Ray cluster (`processes` of
    # them), not processes on this machine.
    nodes: int = 0
    # A multi-process stack's scaling references (the same stack in 1 process, with
    # all the threads or with 1) are timed in the same rounds under their own id;
    # they are no candidate of the document, only its `scaling`.
    label: str = ""
    scaling_of: str = ""

    @property
    def id(self) -> str:
        return self.label or self.stack

    def trained_seeds(self) -> list[dict[str, Any]]:
        """The seeds that trained to the recipe's end: a seed whose worker failed has
        only its number and why (`failed`), and the stack is judged on the others."""
        return [s for s in self.seeds if "failed" not in s]

    def failed_seeds(self) -> list[dict[str, Any]]:
        """Each seed whose worker failed (crashed, hung, or said why): its number and why."""
        return [{"seed": s["seed"], "reason": s["failed"]} for s in self.seeds if "failed" in s]
