"""One comparison measured on several nodes, pooled the only sound way: by the ratio
each node measured within itself.

Machines of the "same" type differ from each other, often by more than the
differences being measured; only a candidate and its baseline measured on the same
machine, interleaved, tell a change of 10% or less reliably (Laaber et al., EMSE
2019). So on a cluster every node that measures candidates measures the baseline
too, round by round, and what is pooled across nodes is each node's own ratio,
never absolute times; and only across nodes whose fingerprints are identical.

The pooled ratio (candidate time / baseline time, below 1: the candidate is
faster) is the geometric mean of the nodes' ratios, each node's ratio the
geometric mean of its rounds' ratios. Its CI comes from a two-stage bootstrap:
the nodes resampled, then the rounds within each drawn node, so that a node
effect widens the CI instead of passing for a real difference. A candidate is
faster (or slower) only when the pooled CI clears the equivalence margin *and*
every node's own ratio falls on that side of 1; where the nodes disagree on the
sign, the answer is "node-dependent", with each node's ratio.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bakeoff.judge.stats import Interval
from bakeoff.judge.thresholds import DEFAULT_MARGIN

# The fingerprint fields that say what a node is (its hardware and software); the
# rest (its load average, say) changes from minute to minute on any machine.
IDENTITY_FIELDS = ("cpu", "memory_gb", "gpu", "machine", "platform", "python", "packages")
REPLICATES = 4000
DECISIONS = ("faster", "slower", "equivalent", "undecided", "node-dependent")


class FingerprintMismatch(ValueError):
    """Nodes that are not the same machine: their ratios are not pooled. The message
    names the field that differs."""


@dataclass(frozen=True)
class NodeRounds:
    """One node's paired rounds of a comparison: per round, the baseline's figure and
    the candidate's (a time: lower is better), measured interleaved on that node."""

    node_id: str
    fingerprint: Mapping[str, Any]
    baseline: np.ndarray
    candidate: np.ndarray

    def __post_init__(self) -> None:
        if len(self.baseline) != len(self.candidate) or len(self.baseline) == 0:
            raise ValueError(
                f"node {self.node_id}: {len(self.baseline)} baseline rounds and "
                f"{len(self.candidate)} candidate rounds; pooling needs paired rounds"
            )
        if np.any(self.baseline <= 0) or np.any(self.candidate <= 0):
            raise ValueError(f"node {self.node_id}: a round's figure is not positive")

    def log_ratios(self) -> np.ndarray:
        return np.log(self.candidate.astype(np.float64) / self.baseline.astype(np.float64))

    def ratio(self) -> float:
        """Candidate / baseline on this node: the geometric mean of its rounds' ratios."""
        return float(np.exp(self.log_ratios().mean()))


@dataclass(frozen=True)
class Pooled:
    """The pooled comparison: candidate / baseline with its CI, each node's own ratio,
    and the call (`DECISIONS`) with why in words."""

    ratio: Interval
    per_node: dict[str, float]
    decision: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio.value,
            "ci": [self.ratio.lo, self.ratio.hi],
            "per_node": self.per_node,
            "decision": self.decision,
            "why": self.why,
        }


# Within an identity field, what belongs to the moment or the process, not the machine:
# the cores a process is pinned to, the clock speed read when the fingerprint was taken.
VOLATILE_KEYS = {"cpu": ("affinity", "frequency_mhz")}


def identity_value(fingerprint: Mapping[str, Any], field: str) -> Any:
    value = fingerprint.get(field)
    if isinstance(value, Mapping) and field in VOLATILE_KEYS:
        return {k: v for k, v in value.items() if k not in VOLATILE_KEYS[field]}
    return value


def fingerprint_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """The first identity field two fingerprints differ in, with both values; None:
    the same machine."""
    for field in IDENTITY_FIELDS:
        va, vb = identity_value(a, field), identity_value(b, field)
        if va != vb:
            return f"{field} ({_short(va)} vs {_short(vb)})"
    return None


def check_fingerprints(nodes: Sequence[NodeRounds]) -> None:
    """Raise FingerprintMismatch naming the first identity field two nodes differ in."""
    first = nodes[0]
    for other in nodes[1:]:
        differ = fingerprint_difference(first.fingerprint, other.fingerprint)
        if differ:
            raise FingerprintMismatch(
                f"nodes {first.node_id} and {other.node_id} differ in {differ}: not pooled; "
                "each node's figures are reported on their own"
            )


def _short(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {v}" for k, v in list(value.items())[:4]) + ", ...}"
    return repr(value)


def pool(
    nodes: Sequence[NodeRounds],
    margin: float = DEFAULT_MARGIN,
    level: float = 0.95,
    seed: int = 0,
) -> Pooled:
    """The candidate / baseline ratio pooled over `nodes` (see the module's text)."""
    if not nodes:
        raise ValueError("pooling needs at least one node")
    check_fingerprints(nodes)
    logs = [n.log_ratios() for n in nodes]
    point = float(np.exp(np.mean([x.mean() for x in logs])))
    rng = np.random.default_rng(seed)
    # Stage 1: each replicate draws as many nodes as there are, with replacement.
    drawn = rng.integers(0, len(nodes), size=(REPLICATES, len(nodes)))
    replicate = np.zeros(REPLICATES)
    for slot in range(len(nodes)):
        for i, x in enumerate(logs):
            where = drawn[:, slot] == i
            # Stage 2: each draw of a node resamples that node's rounds afresh.
            rounds = rng.integers(0, len(x), size=(int(where.sum()), len(x)))
            replicate[where] += x[rounds].mean(axis=1)
    replicate = np.exp(replicate / len(nodes))
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(replicate, [tail, 100.0 - tail])
    ratio = Interval(point, float(lo), float(hi))
    per_node = {n.node_id: n.ratio() for n in nodes}
    decision, why = _decide(ratio, per_node, margin)
    return Pooled(ratio, per_node, decision, why)


def _decide(ratio: Interval, per_node: dict[str, float], margin: float) -> tuple[str, str]:
    nodes = ", ".join(f"{node} {r:.3f}" for node, r in per_node.items())
    band = (1.0 / (1.0 + margin), 1.0 / (1.0 - margin))  # the margin, as a time ratio
    faster = [r < 1.0 for r in per_node.values()]
    # Nodes on both sides of 1, one of them beyond the margin: a gain (or loss) that
    # some node does not show is no answer for "a node of this type".
    beyond = any(not band[0] <= r <= band[1] for r in per_node.values())
    if any(faster) and not all(faster) and beyond:
        return (
            "node-dependent",
            f"the nodes disagree on which is faster (candidate / baseline: {nodes})",
        )
    interval = f"pooled {ratio.value:.3f} (CI {ratio.lo:.3f}-{ratio.hi:.3f})"
    if ratio.hi < band[0] and all(faster):
        return "faster", f"{interval}; {nodes}"
    if ratio.lo > band[1] and not any(faster):
        return "slower", f"{interval}; {nodes}"
    if ratio.lo >= band[0] and ratio.hi <= band[1]:
        return "equivalent", f"{interval} within {margin:.0%}; {nodes}"
    return "undecided", f"{interval} straddles the {margin:.0%} margin; {nodes}"
