"""One comparison of the leader with another candidate: the paired ratio, the call
made on it, and why it stayed undecided. Its own module so that the verdict
(`verdict.py`) and its words (`verdict_words.py`) both use it without importing
each other."""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.judge.stats import Interval

__all__ = ["Comparison", "Judgement"]


@dataclass(frozen=True)
class Judgement:
    """One pairwise comparison: how much faster `cand` is than `base`, and the call."""

    ratio: Interval
    decision: str  # faster | slower | equivalent | undecided (see `compare`)
    why: str = ""  # why a close call was left undecided
    needs_processes: bool = False  # more processes each could decide it


@dataclass(frozen=True)
class Comparison:
    """The leader against one other measured candidate: how many times faster the
    leader is, what was decided, and (when not separated) why, in one line."""

    id: str
    judged: Judgement
    level: float
    pair_ratios: list[float]
    why_tied: str = ""  # empty when the leader is separated from (faster than) it
    eligible: bool = True  # False: measured, but beyond the workload's constraints

    def to_dict(self) -> dict:
        iv = self.judged.ratio
        return {
            "id": self.id,
            "ratio": iv.value,
            "ci": [iv.lo, iv.hi],
            "level": self.level,
            "decision": self.judged.decision,
            "why": self.why_tied,
            "process_pair_ratios": self.pair_ratios,
            "eligible": self.eligible,
        }
