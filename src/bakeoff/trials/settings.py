"""How the trial engine measures a group of candidates (docs/method.md §2-4)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bakeoff.judge import verdict


@dataclass(frozen=True)
class TrialSettings:
    threads: int  # each worker's threads: what the measurement takes of the machine
    trial_timeout_s: float
    warmup_s: float
    warmup_calls: int
    slice_s: float  # target timed seconds per candidate per round
    settle_s: float  # untimed seconds (at least one call) before each timed block
    min_rounds: int
    max_rounds: int
    budget_s: float  # soft limit on the rounds of this group, checked after min_rounds
    seed: int
    objective: str = "latency"
    margin: float = verdict.DEFAULT_MARGIN
    ci_target: float = 0.02  # stop when every objective CI half-width is this tight
    racing: bool = True
    # The workload's [constraints] (key -> limit): a candidate beyond one cannot win,
    # so it neither leads the race nor races on past the minimum rounds.
    constraints: dict[str, float] = field(default_factory=dict)
    # Workers loaded and quality-checked at once before a group's first round
    # (1: one at a time, so each cold start is measured alone).
    load_side_by_side: int = 1
    # Timed calls per round are a multiple of this: a generative workload's prompt
    # count, so that every round of every candidate times each prompt alike.
    calls_multiple: int = 1
