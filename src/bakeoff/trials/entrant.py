"""What the trial engine reads and writes of a candidate: its `Entrant` side.

The inference `Candidate` is one; a training candidate will be another. The
engine fills in the load and first call, the warm-up, the timed rounds (with the
worker process of each) and peak memory, and sets the final status, why sampling
stopped and the validity.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

import numpy as np

from bakeoff.judge.constraints import Figures


class Entrant(Protocol):
    batch_size: int
    status: str
    reason: str
    settings: dict[str, Any]
    load_s: float | None
    first_call_s: float | None
    model_bytes: int | None
    warmup_ns: list[int]
    rounds_ns: list[list[int]]
    block_ns: list[int]
    round_slots: list[int]
    peak_rss_mb: float | None
    # How its measuring worker was started and shared (what its worker said, and
    # whether it loaded alone), so its cold start and memory can be read rightly.
    worker: dict[str, Any]
    stopped: str
    validity: str
    validity_reason: str

    @property
    def id(self) -> str: ...

    def set_status(self, status: str, reason: str = "") -> None: ...

    def samples(self) -> np.ndarray:
        """(rounds, calls) matrix of latencies in ns."""
        ...

    def figures(self, keys: Collection[str] = ()) -> Figures:
        """What the [constraints] limit, from its measurements."""
        ...
