"""A generative candidate: one runtime at one precision, as the trial engine sees it
(`bakeoff.trials.entrant.Entrant`), with its requests' figures beside the timed one.

The engine times time per output token (TPOT) per request; each request's time to
first token (TTFT) and its token count come with every round (`Timed.extra`) and
are kept here, round by round, in the same shape as the timed samples."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bakeoff.judge.constraints import Figure, Figures
from bakeoff.judge.generation import GenerationQuality

STATUSES = ("pending", "ok", "rejected", "failed", "unavailable")


# The generative bake-off's reference and baseline: PyTorch at FP32.
REFERENCE = ("torch", "fp32")


@dataclass(frozen=True)
class ConcurrentRound:
    """One round of the sweep at one concurrency: each request's time to first token
    (ns after its batch was submitted) and output tokens, and the round's wall time."""

    ttft_ns: list[int]
    tokens: list[int]
    block_ns: int


@dataclass
class GenCandidate:
    runtime: str
    precision: str
    batch_size: int = 1  # one request at a time (the engine's rounds)
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
    # per round, per request: time to first token (ns) and output tokens
    ttft_ns: list[list[int]] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    quality: GenerationQuality | None = None
    # The concurrency sweep: per number of requests submitted together, its rounds
    # (each whole passes over the prompts); why it stopped short, if it did.
    concurrency: dict[int, list[ConcurrentRound]] = field(default_factory=dict)
    concurrency_lost: str = ""

    @property
    def id(self) -> str:
        return f"{self.runtime}-{self.precision}"

    def set_status(self, status: str, reason: str = "") -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        self.status, self.reason = status, reason

    def samples(self) -> np.ndarray:
        """(rounds, requests) matrix of TPOT in ns."""
        return np.asarray(self.rounds_ns, dtype=np.int64)

    def figures(self, keys: Collection[str] = ()) -> Figures:
        """A generative workload sets no [constraints] yet: nothing is limited."""
        none = Figure(None)
        return Figures(none, none, Figure(self.peak_rss_mb), none, none)
