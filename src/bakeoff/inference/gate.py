"""The inference quality gate as the trial engine's `Gate`: a worker's outputs on
the held-out samples against the FP32 reference's (docs/method.md §1)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bakeoff.candidates import Candidate
from bakeoff.inference.messages import LoadJob
from bakeoff.inference.quality_outputs import alt_outputs_path
from bakeoff.judge.quality import Quality, evaluate
from bakeoff.trials.engine import Checked, GateFailed
from bakeoff.trials.jobs import Job


@dataclass(frozen=True)
class QualityGate:
    reference: np.ndarray
    labels: np.ndarray | None
    metric: str
    max_drop: float
    reference_alt: np.ndarray | None = None  # at the second shape (variable axes halved)

    def _judge(self, path: Path, reference: np.ndarray, what: str) -> Quality:
        try:
            outputs = np.load(path, allow_pickle=False)
            return evaluate(self.metric, outputs, reference, self.labels, self.max_drop)
        except (ValueError, OSError) as exc:
            raise GateFailed(f"quality check{what} failed: {exc}") from None

    def check(self, entrant: Candidate, job: Job, record: bool) -> Checked:
        """The outputs the worker saved at `job.outputs_path` (and beside it, at the
        second shape, when axes are variable); `record` keeps the findings on the
        candidate."""
        if not isinstance(job, LoadJob):
            raise GateFailed(f"the quality gate judges inference workers, not a {job.kind} job")
        path = Path(job.outputs_path)
        quality = self._judge(path, self.reference, "")
        if record:
            entrant.quality = quality
        if not quality.passed:
            return Checked(False, "quality gate: " + quality.describe())
        if self.reference_alt is not None:
            alt = self._judge(alt_outputs_path(path), self.reference_alt, " at the second shape")
            if record:
                entrant.quality_alt = alt
            if not alt.passed:
                return Checked(
                    False,
                    "quality gate at the second shape (variable axes halved): " + alt.describe(),
                )
        return Checked(True, f"quality {quality.metric} {quality.value:.4f}")
