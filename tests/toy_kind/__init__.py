"""A toy fourth kind of bake-off, built only from the shared parts: the run
lifecycle and its event sink (`bakeoff.lifecycle`), the candidate core
(`bakeoff.candidate_core`), a gate (`trials.lanes.Gate`), the one trial engine,
the store and `bakeoff show`. Nothing outside this package knows it exists.

It races fake-runtime workers that differ only in their latency, and names the
fastest by its median round: a kind of bake-off in about fifty lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.backends import Variant
from bakeoff.candidate_core import CandidateCore
from bakeoff.inference.messages import JobBase, LoadJob, LoadSpec
from bakeoff.lifecycle import StoreEvents, lifecycle, new_run_id
from bakeoff.source import ModelSource
from bakeoff.trials.engine import Checked, Engine, run_trials
from bakeoff.trials.launcher import LocalLauncher
from bakeoff.trials.settings import TrialSettings


@dataclass
class ToyCandidate(CandidateCore):
    name: str
    latency_ms: float
    batch_size: int = 1

    @property
    def id(self) -> str:
        return self.name


class EveryOutputPasses:
    """The toy kind's gate: a worker passes once it has written its first outputs."""

    def check(self, entrant: ToyCandidate, job: LoadJob, record: bool) -> Checked:
        return Checked(Path(job.outputs_path).exists(), "its outputs were written")


def _job(folder: Path, c: ToyCandidate) -> LoadJob:
    data = folder / "data.npz"
    if not data.exists():
        rng = np.random.default_rng(0)
        np.savez(data, **{"quality/x": rng.random((4, 2)), "pool/x": rng.random((16, 2))})
    base = JobBase(ModelSource("fake", None, None, None), str(data), ("x",), str(folder))
    load = LoadSpec(Variant("fake", "fp32"), {}, 1, 1, {"latency_ms": c.latency_ms}, c.id)
    return LoadJob(base=base, load=load, outputs_path=str(folder / f"{c.id}.npy"))


def run_toy(store: Path, latencies: dict[str, float], settings: TrialSettings) -> dict[str, Any]:
    """Measure each named latency's fake worker; the run's document."""
    run_id = new_run_id("toy-")
    with lifecycle(store, run_id, resumable=False) as run:
        run.start("toy", {"threads": 1}, {"kind": "toy"})
        candidates = [ToyCandidate(name, ms) for name, ms in latencies.items()]
        jobs = {c.id: _job(run.folder.path, c) for c in candidates}
        events = StoreEvents(lambda _: None, run.store, run_id)
        launcher = LocalLauncher(run.folder.logs)
        run_trials(candidates, jobs, Engine(EveryOutputPasses(), launcher, settings, events))
        medians = {c.id: float(np.median(c.samples())) for c in candidates if c.status == "ok"}
        winner = min(medians, key=medians.__getitem__)
        rows = [{"id": c.id, "status": c.status, "reason": c.reason} for c in candidates]
        doc = {
            "run_id": run_id,
            "kind": "toy",
            "candidates": rows,
            "verdicts": [{"winner": winner, "headline": f"{winner} has the lowest median round."}],
        }
        run.finish(doc)
        return doc
