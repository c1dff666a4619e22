"""A training candidate: one stack on the run's recipe, as the trial engine sees it
(`bakeoff.trials.entrant.Entrant`) plus what its seeds found."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bakeoff.judge.constraints import Figure, Figures

# `rejected` is the engine's word for a worker its gate refused (here: a first loss
# that is not the reference's); the document says `flagged`.
STATUSES = ("pending", "ok", "rejected", "failed", "unavailable", "diverged", "flagged")


@dataclass
class TrainCandidate:
    stack: str
    batch_size: int  # the global batch: samples per timed step
    status: str = "pending"
    reason: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    load_s: float | None = None
    first_call_s: float | None = None
    model_bytes: int | None = None
    warmup_ns: list[int] = field(default_factory=list)
    rounds_ns: list[list[int]] = field(default_factory=list)
    block_ns: list[int] = field(default_factory=list)
    round_slots: list[int] = field(default_factory=list)
    peak_rss_mb: float | None = None
    worker: dict[str, Any] = field(default_factory=dict)
    stopped: str = ""
    validity: str = ""
    validity_reason: str = ""
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

    def set_status(self, status: str, reason: str = "") -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        self.status, self.reason = status, reason

    def trained_seeds(self) -> list[dict[str, Any]]:
        """The seeds that trained to the recipe's end: a seed whose worker failed has
        only its number and why (`failed`), and the stack is judged on the others."""
        return [s for s in self.seeds if "failed" not in s]

    def failed_seeds(self) -> list[dict[str, Any]]:
        """Each seed whose worker failed (crashed, hung, or said why): its number and why."""
        return [{"seed": s["seed"], "reason": s["failed"]} for s in self.seeds if "failed" in s]

    def samples(self) -> np.ndarray:
        """(rounds, steps) matrix of step times in ns."""
        return np.asarray(self.rounds_ns, dtype=np.int64)

    def figures(self, keys: Collection[str] = ()) -> Figures:
        """A training recipe sets no [constraints]: nothing is limited."""
        none = Figure(None)
        return Figures(none, none, Figure(self.peak_rss_mb), none, none)
