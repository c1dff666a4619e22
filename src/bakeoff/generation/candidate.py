"""A generative candidate: one runtime at one precision, as the trial engine sees it
(`bakeoff.trials.entrant.Entrant`), with its requests' figures beside the timed one.

The engine times time per output token (TPOT) per request; each request's time to
first token (TTFT) and its token count come with every round (`Timed.extra`) and
are kept here, round by round, in the same shape as the timed samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bakeoff.candidate_core import CandidateCore
from bakeoff.judge.generation import GenerationQuality

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
class GenCandidate(CandidateCore):
    """One engine at one precision, one request at a time (the engine's rounds)."""

    runtime: str
    precision: str
    # How the weights were quantized where a precision has several ways ("awq",
    # "gptq" for INT4 beside the plain round-to-nearest); "" for the one way.
    method: str = ""
    batch_size: int = 1
    # per round, per request: time to first token (ns) and output tokens
    ttft_ns: list[list[int]] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    quality: GenerationQuality | None = None
    # The concurrency sweep: per number of requests submitted together, its rounds
    # (each whole passes over the prompts); why it stopped short, if it did.
    concurrency: dict[int, list[ConcurrentRound]] = field(default_factory=dict)
    concurrency_lost: str = ""
    # The server scenario (`generation.server_scenario`): the rates tested, the highest
    # one within the target, the batching it had; or why its worker was lost.
    server: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.runtime}-{self.precision}" + (f"-{self.method}" if self.method else "")
