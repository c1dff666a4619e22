"""What every kind's candidate holds (inference, training, text generation): the
fields the trial engine fills in as it measures (`trials.entrant.Entrant`), and
what it asks of them. Each kind's candidate extends it with its own identity (a
variant at a batch size, a stack, an engine at a precision) and what only it
measures, and names its candidates (`id`).

The fields are keyword-only, so that each kind's own fields come first when it is
built (`GenCandidate("torch", "fp32")`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from bakeoff.judge.constraints import Figure, Figures

__all__ = ["CandidateCore"]


@dataclass(kw_only=True)
class CandidateCore:
    # The statuses a candidate of the kind can have; the engine sets the first five.
    STATUSES: ClassVar[tuple[str, ...]] = ("pending", "ok", "rejected", "failed", "unavailable")

    status: str = "pending"
    reason: str = ""
    settings: dict[str, Any] = field(default_factory=dict)  # what its runtime applied
    load_s: float | None = None
    first_call_s: float | None = None
    model_bytes: int | None = None  # what it weighs on disk (sizes.model_bytes)
    warmup_ns: list[int] = field(default_factory=list)
    rounds_ns: list[list[int]] = field(default_factory=list)
    block_ns: list[int] = field(default_factory=list)
    round_slots: list[int] = field(default_factory=list)  # worker process of each round
    peak_rss_mb: float | None = None
    # Its measuring worker (inference.shared_workers, trials.engine): what that process said,
    # whether it loaded alone, and what its peak memory covers.
    worker: dict[str, Any] = field(default_factory=dict)
    stopped: str = ""  # why sampling ended (raced out, CI tight enough, budget)
    validity: str = ""
    validity_reason: str = ""

    def set_status(self, status: str, reason: str = "") -> None:
        if status not in self.STATUSES:
            raise ValueError(f"unknown status {status!r}")
        self.status, self.reason = status, reason

    def samples(self) -> np.ndarray:
        """(rounds, calls) matrix of the timed figure in ns (a call's latency, a
        step's time, a token's time)."""
        return np.asarray(self.rounds_ns, dtype=np.int64)

    def figures(self, keys: Collection[str] = ()) -> Figures:
        """What a workload's [constraints] could limit: here only peak memory, for a
        kind whose workloads set no constraints (nothing is limited by it)."""
        none = Figure(None)
        return Figures(none, none, Figure(self.peak_rss_mb), none, none)
