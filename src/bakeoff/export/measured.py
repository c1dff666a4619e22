"""The candidate an export writes, with what every export format reads of the run
that measured it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bakeoff.batching import Layout
from bakeoff.paths import RunFolder


@dataclass(frozen=True)
class MeasuredCandidate:
    """Candidate `cand` of the stored run `record` (its folder `run`), and the run's
    quality split (`examples`, batched as `layout`), which the exports trace the model
    on and check it against."""

    record: dict[str, Any]
    cand: dict[str, Any]
    run: RunFolder
    examples: dict[str, np.ndarray]
    layout: Layout

    @property
    def threads(self) -> int:
        """The threads the candidate was measured with: what its runtime reported using,
        else its own option, else the run's setting."""
        s = self.cand.get("settings") or {}
        for key in ("intra_op_threads", "INFERENCE_NUM_THREADS", "num_threads"):
            if isinstance(s.get(key), int):
                return int(s[key])
        options = self.cand.get("options") or {}
        return int(options.get("threads") or self.record["settings"]["threads"])
