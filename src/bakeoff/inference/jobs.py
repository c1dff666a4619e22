"""The typed worker jobs of a run's candidates: one place that says where each
worker's outputs go and with how many threads it runs."""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.candidates import Candidate
from bakeoff.inference.messages import ColdStartJob, JobBase, LoadJob, LoadSpec
from bakeoff.paths import RunFolder


@dataclass(frozen=True)
class CandidateJobs:
    base: JobBase  # source, data_path, input_names, the quality gate
    folder: RunFolder
    threads: int  # every runtime's, unless a hand-written candidate says otherwise
    cpus: tuple[int, ...] | None = None

    def threads_of(self, c: Candidate) -> int:
        """Every runtime gets the same threads unless a hand-written candidate says otherwise."""
        return int(c.options.get("threads", self.threads))

    def spec(self, c: Candidate, threads: int | None = None, streams: int = 1) -> LoadSpec:
        return LoadSpec(
            variant=c.variant,
            artifact=c.artifact,
            batch_size=c.batch_size,
            threads=self.threads_of(c) if threads is None else threads,
            options=c.options,
            candidate_id=c.id,
            streams=streams,
        )

    def load(self, c: Candidate, threads: int | None = None, streams: int = 1) -> LoadJob:
        """The job of a worker that is measured: its outputs on the quality hold-out
        go to `outputs/<id>.npy` (`<id>-x<streams>.npy` for more streams)."""
        name = c.id if streams == 1 else f"{c.id}-x{streams}"
        self.folder.outputs.mkdir(parents=True, exist_ok=True)
        return LoadJob(
            base=self.base,
            load=self.spec(c, threads, streams),
            outputs_path=str(self.folder.outputs / f"{name}.npy"),
            cpus=self.cpus,
        )

    def cold_start(self, c: Candidate) -> ColdStartJob:
        return ColdStartJob(base=self.base, load=self.spec(c), cpus=self.cpus)
