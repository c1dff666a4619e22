"""What the stages of one run share: the workload, the options, where results go,
and the candidates (a list the stages update in place), with the event sink the
trial engine reports to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bakeoff.candidates import Candidate, candidate_document
from bakeoff.inference.messages import JobBase
from bakeoff.inference.options import RunOptions
from bakeoff.lifecycle import StoreEvents
from bakeoff.paths import RunFolder
from bakeoff.report import Reporter
from bakeoff.store import Store
from bakeoff.workload import Workload


@dataclass
class RunContext:
    workload: Workload
    opts: RunOptions
    rep: Reporter
    store: Store
    run_id: str
    folder: RunFolder
    job_base: JobBase
    candidates: list[Candidate]
    threads: int
    batch_sizes: list[int]
    env: dict[str, Any]
    settings: dict[str, Any]  # stored with the run; `left_out` grows as variants are left out
    labels: np.ndarray | None  # the quality hold-out's labels, for accuracy metrics

    def save(self, c: Candidate) -> None:
        self.store.put_candidate(self.run_id, candidate_document(c))

    def show(self) -> None:
        self.rep.candidates(self.candidates)

    def leave_out(self, vid: str, why: str) -> None:
        """A variant another one made unnecessary: not a candidate row (nothing is
        missing), but listed with why beside what the advice left out."""
        self.settings.setdefault("left_out", {})[vid] = why
        gone = [c for c in self.candidates if c.variant.id == vid]
        self.candidates[:] = [c for c in self.candidates if c.variant.id != vid]
        self.store.leave_out(self.run_id, [c.id for c in gone], self.settings)
        self.rep.stage(f"left out {vid}: {why}")
        self.show()


class RunEvents(StoreEvents):
    """The trial engine's events for an inference run: progress to the reporter,
    timed calls to the store, and each changed candidate saved and the table shown."""

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx.rep.stage, ctx.store, ctx.run_id)
        self.ctx = ctx

    def changed(self, entrant: Any | None) -> None:
        if isinstance(entrant, Candidate):
            self.ctx.save(entrant)
        self.ctx.show()
