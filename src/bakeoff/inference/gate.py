"""The inference quality gate as the trial engine's `Gate`: a worker's outputs on
the held-out samples against the FP32 reference's, every output matched by name
(judge.outputs; docs/method.md §1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bakeoff.candidates import Candidate
from bakeoff.errors import UserError
from bakeoff.inference.messages import LoadJob
from bakeoff.inference.quality_outputs import alt_outputs_path
from bakeoff.judge.outputs import Named, OutputGate, OutputRule, judge_outputs, load_named
from bakeoff.judge.quality import Quality
from bakeoff.trials.engine import Checked, GateFailed
from bakeoff.trials.jobs import Job
from bakeoff.workload.spec import QualitySpec


def output_gate(spec: QualitySpec) -> OutputGate:
    """`[quality]` as rules: its metric and max_drop, the outputs it names, and each
    `[quality.per_output.<name>]` with what it leaves unsaid taken from `[quality]`."""
    rule = OutputRule(spec.metric, spec.max_drop)
    per_output = {
        name: OutputRule(
            own.metric or rule.metric, rule.max_drop if own.max_drop is None else own.max_drop
        )
        for name, own in spec.per_output.items()
    }
    return OutputGate(rule, tuple(spec.outputs) if spec.outputs else None, per_output)


@dataclass(frozen=True)
class QualityGate:
    reference: Named
    labels: np.ndarray | None
    rule: OutputRule
    reference_alt: Named | None = None  # at the second shape (variable axes halved)
    only: Sequence[str] | None = None  # [quality] outputs
    per_output: Mapping[str, OutputRule] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        spec: QualitySpec,
        reference: Named,
        reference_alt: Named | None,
        labels: np.ndarray | None,
    ) -> QualityGate:
        """The gate `[quality]` asks for; an output it names that the reference does
        not return is the workload's error, named with the ones it does."""
        rule = OutputRule(spec.metric, spec.max_drop)
        returned = [name for name, _ in reference]
        for key, names in (("outputs", spec.outputs or []), ("per_output", spec.per_output)):
            unknown = [n for n in names if n not in returned]
            if unknown and len(returned) > 1:
                raise UserError(
                    f"[quality] {key} names {', '.join(unknown)}, which the model does not "
                    f"return; its outputs are {', '.join(returned)}"
                )
        only = spec.outputs if len(returned) > 1 else None
        return cls(reference, labels, rule, reference_alt, only, output_gate(spec).per_output)

    def _judge(self, path: Path, reference: Named, what: str) -> Quality:
        try:
            outputs = load_named(path)
            return judge_outputs(
                outputs, reference, self.labels, self.rule, self.only, self.per_output
            )
        except (ValueError, OSError, KeyError) as exc:
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
        named = f" (worst: output {quality.output})" if quality.outputs else ""
        return Checked(True, f"quality {quality.metric} {quality.value:.4f}{named}")
