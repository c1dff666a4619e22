"""The figures of a generative candidate: its quality gate against the FP32
reference's greedy text, and its per-request time to first token and per output
token (pure; the runtimes produce the tokens and timestamps).

Greedy decoding is deterministic, so an exact variant writes the reference's
tokens. A variant is judged on two things that a user of its text would notice:
how often its first `n` tokens are the reference's (the share of prompts), with
the mean length of the common prefix beside it, and its perplexity on held-out
text against the reference's, as a relative rise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_COMPARED_TOKENS = 16
DEFAULT_MIN_AGREEMENT = 0.5
DEFAULT_MAX_PERPLEXITY_RISE = 0.10


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens the two sequences share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def token_agreement(
    reference: Sequence[Sequence[int]],
    candidate: Sequence[Sequence[int]],
    n: int = DEFAULT_COMPARED_TOKENS,
) -> tuple[float, float]:
    """(share of prompts whose first `n` generated tokens equal the reference's,
    mean common prefix in tokens). A reference that stopped before `n` tokens
    (its end-of-text) is matched only by a candidate that stopped with it."""
    if len(reference) != len(candidate):
        raise ValueError(f"{len(candidate)} candidate outputs for {len(reference)} prompts")
    if not reference:
        raise ValueError("no prompts to compare")
    same = [list(c[:n]) == list(r[:n]) for r, c in zip(reference, candidate, strict=True)]
    prefix = [common_prefix(r, c) for r, c in zip(reference, candidate, strict=True)]
    return float(np.mean(same)), float(np.mean(prefix))


def perplexity(nll_sum: float, tokens: int) -> float:
    """exp of the mean negative log-likelihood per predicted token."""
    if tokens <= 0:
        raise ValueError("perplexity needs at least one predicted token")
    mean = nll_sum / tokens
    return math.exp(mean) if math.isfinite(mean) else math.inf


@dataclass(frozen=True)
class GenerationQuality:
    token_agreement: float
    common_prefix: float
    perplexity: float
    reference_perplexity: float
    compared_tokens: int = DEFAULT_COMPARED_TOKENS
    min_agreement: float = DEFAULT_MIN_AGREEMENT
    max_drop: float = DEFAULT_MAX_PERPLEXITY_RISE  # relative perplexity rise allowed

    @property
    def perplexity_rise(self) -> float:
        """Relative: 0.05 is 5% higher than the reference's."""
        if not math.isfinite(self.perplexity):
            return math.inf
        return self.perplexity / self.reference_perplexity - 1.0

    @property
    def agreement_ok(self) -> bool:
        return self.token_agreement >= self.min_agreement

    @property
    def perplexity_ok(self) -> bool:
        # A variant better than the reference by chance is never rejected for it.
        return self.perplexity_rise <= self.max_drop + 1e-12

    @property
    def passed(self) -> bool:
        return self.agreement_ok and self.perplexity_ok

    def describe(self) -> str:
        """The figures, and which one failed: the same sentence everywhere."""
        agreement = (
            f"first {self.compared_tokens} tokens equal the reference's on "
            f"{self.token_agreement:.0%} of prompts (common prefix {self.common_prefix:.1f} "
            f"tokens; at least {self.min_agreement:.0%} needed)"
        )
        ppl = (
            f"perplexity {self.perplexity:.2f} vs reference {self.reference_perplexity:.2f} "
            f"({self.perplexity_rise:+.1%}; at most +{self.max_drop:.0%} allowed)"
        )
        checks = (("token agreement", self.agreement_ok), ("perplexity", self.perplexity_ok))
        failed = [what for what, ok in checks if not ok]
        verdict = f"rejected on {' and '.join(failed)}: " if failed else ""
        return f"{verdict}{agreement}; {ppl}"

    def to_json(self) -> dict[str, Any]:
        return {
            "token_agreement": self.token_agreement,
            "common_prefix": self.common_prefix,
            "perplexity": self.perplexity,
            "reference_perplexity": self.reference_perplexity,
            "perplexity_rise": self.perplexity_rise,
            "compared_tokens": self.compared_tokens,
            "min_agreement": self.min_agreement,
            "max_drop": self.max_drop,
            "passed": self.passed,
        }


def judge(
    reference_tokens: Sequence[Sequence[int]],
    candidate_tokens: Sequence[Sequence[int]],
    reference_perplexity: float,
    candidate_perplexity: float,
    compared_tokens: int = DEFAULT_COMPARED_TOKENS,
    min_agreement: float = DEFAULT_MIN_AGREEMENT,
    max_drop: float = DEFAULT_MAX_PERPLEXITY_RISE,
) -> GenerationQuality:
    share, prefix = token_agreement(reference_tokens, candidate_tokens, compared_tokens)
    return GenerationQuality(
        share,
        prefix,
        candidate_perplexity,
        reference_perplexity,
        compared_tokens,
        min_agreement,
        max_drop,
    )


@dataclass(frozen=True)
class RequestTiming:
    """One generate call: when it started and when each output token arrived (ns,
    one monotonic clock)."""

    start_ns: int
    token_ns: tuple[int, ...]

    @property
    def tokens(self) -> int:
        return len(self.token_ns)

    @property
    def ttft_ns(self) -> int:
        """Time to first token: the prefill and the first decode step."""
        if not self.token_ns:
            raise ValueError("a request that produced no token has no time to first token")
        return self.token_ns[0] - self.start_ns

    @property
    def tpot_ns(self) -> float | None:
        """Time per output token after the first (the decode rate, as vLLM's benchmark
        defines it); None for a request that produced a single token."""
        if len(self.token_ns) < 2:
            return None
        return (self.token_ns[-1] - self.token_ns[0]) / (len(self.token_ns) - 1)

    @property
    def total_ns(self) -> int:
        return (self.token_ns[-1] if self.token_ns else self.start_ns) - self.start_ns
