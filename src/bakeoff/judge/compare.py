"""Two runs, candidate by candidate: did anything get faster or slower?

Per candidate measured in both runs, the ratio B/A of the objective the verdict
used, with a block-bootstrap CI from the verdict's own code, and a word: faster,
slower, same (the CI inside the equivalence margin) or undecided (the CI
straddles a margin edge: more rounds are needed to tell). Differences between
the runs' environments and settings are listed as key paths.

Pure: it works on each candidate's measured rounds and on plain mappings;
bakeoff.compare reads both runs from the store, report.compare prints the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bakeoff.judge import verdict
from bakeoff.judge.verdict import Measured

# The default margin for 'same' between two runs. A run's CI covers its rounds,
# not the process: two runs of one unchanged workload here differed by 3-4% for
# some candidates, with round CIs under 1% wide (memory layout, frequency), so a
# run-to-run margin of the verdict's 2% calls that noise a change.
RUN_TO_RUN_MARGIN = 0.05
_WORDS = {"faster": "faster", "slower": "slower", "equivalent": "same", "undecided": "undecided"}


@dataclass(frozen=True)
class Difference:
    key: str
    a: Any
    b: Any


@dataclass(frozen=True)
class Row:
    candidate: str
    objective: str
    a: float  # the objective in run A: ms (latency) or samples/s (throughput)
    b: float
    ratio: float  # B/A of the objective
    ratio_lo: float
    ratio_hi: float
    change: str  # faster | slower | same | undecided
    slower_by_pct: float  # how much slower B is (0 when not slower), from the point estimate

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "objective": self.objective,
            "a": self.a,
            "b": self.b,
            "ratio_b_over_a": self.ratio,
            "ci": [self.ratio_lo, self.ratio_hi],
            "change": self.change,
        }


@dataclass
class Comparison:
    run_a: str
    run_b: str
    margin: float
    level: float
    environment: list[Difference] = field(default_factory=list)
    settings: list[Difference] = field(default_factory=list)
    runtime_settings: dict[str, list[Difference]] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    not_compared: dict[str, str] = field(default_factory=dict)

    def regressions(self, pct: float) -> list[Row]:
        """Candidates slower by more than `pct` percent with the CI excluding that much."""
        limit = 1.0 - pct / 100.0
        return [r for r in self.rows if _speed_ci(r)[1] < limit]

    def to_dict(self) -> dict[str, Any]:
        def diffs(items: list[Difference]) -> list[dict[str, Any]]:
            return [{"key": d.key, "a": d.a, "b": d.b} for d in items]

        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "margin": self.margin,
            "ci_level": self.level,
            "environment_differences": diffs(self.environment),
            "settings_differences": diffs(self.settings),
            "runtime_settings_differences": {k: diffs(v) for k, v in self.runtime_settings.items()},
            "candidates": [r.to_dict() for r in self.rows],
            "only_in_a": self.only_a,
            "only_in_b": self.only_b,
            "not_compared": self.not_compared,
        }


def _speed_ci(row: Row) -> tuple[float, float]:
    """How many times as fast B is as A (> 1: faster), as a CI."""
    if row.objective == "latency":  # the ratio is of times: invert it
        return 1.0 / row.ratio_hi, 1.0 / row.ratio_lo
    return row.ratio_lo, row.ratio_hi


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def differences(
    a: Mapping[str, Any], b: Mapping[str, Any], skip: set[str] | None = None
) -> list[Difference]:
    """Every key path (nested keys joined by '.') whose value differs, sorted; `skip`
    holds key paths that are no difference."""
    fa, fb = _flatten(a), _flatten(b)
    keys = sorted(set(fa) | set(fb))
    return [
        Difference(k, fa.get(k), fb.get(k))
        for k in keys
        if k not in (skip or set()) and fa.get(k) != fb.get(k)
    ]


def default_margin(run_margin: float) -> float:
    """The margin for 'same' when none is given: run A's own, or the run-to-run one
    if that is larger."""
    return max(run_margin, RUN_TO_RUN_MARGIN)


def candidate_change(
    candidate: str,
    objective: str,
    a: Measured,
    b: Measured,
    a_value: float,
    b_value: float,
    level: float,
    margin: float,
) -> Row:
    """One candidate from run A to run B: B/A of the objective (`a_value`, `b_value`:
    its figure in each run) with its CI at `level`, and the word for the change."""
    # speedup(A, B) is "times as fast" (> 1: B faster); pairing round i of A
    # with round i of B is arbitrary, but the runs are independent, so
    # resampling them together is resampling each on its own.
    sp = verdict.speedup(a, b, objective, level)
    if objective == "latency":
        ratio, lo, hi = 1.0 / sp.value, 1.0 / sp.hi, 1.0 / sp.lo
    else:
        ratio, lo, hi = sp.value, sp.lo, sp.hi
    change = _WORDS[verdict.compare(sp, margin)]
    slower_by = max(0.0, (1 - sp.value) * 100)
    return Row(candidate, objective, a_value, b_value, ratio, lo, hi, change, slower_by)
