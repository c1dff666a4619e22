"""The training gate as the trial engine's `Gate`: a stack's first loss against the
reference's, so that a stack starting from other weights or other data is flagged
before it is timed."""

from __future__ import annotations

import math

from bakeoff.training.candidate import TrainCandidate
from bakeoff.trials.engine import Checked
from bakeoff.trials.jobs import Job


class FirstLossGate:
    """A stack's first loss (the initial weights on the first batch, in eval mode,
    before any update) must be the reference's: same weights, same data, same loss."""

    def __init__(self, expected: float, tolerance: dict[str, float]) -> None:
        self.expected, self.tolerance = expected, tolerance

    def check(self, entrant: TrainCandidate, job: Job, record: bool) -> Checked:
        first = entrant.worker.get("first_loss")
        if first is None or not math.isfinite(first):
            return Checked(False, f"its first loss is {first}, not a number")
        tol = self.tolerance.get(entrant.stack, 1e-4)
        drift = abs(first - self.expected) / max(abs(self.expected), 1e-12)
        words = f"first loss {first:.6f} (reference {self.expected:.6f})"
        if drift > tol:
            return Checked(False, f"{words}: off by {drift:.2%}, more than {tol:.2%}")
        return Checked(True, words)


# BF16 rounds the forward pass: its first loss is the reference's to about 1%.
FIRST_LOSS_TOLERANCE = {"torch-bf16": 0.02}
