"""Pooling a comparison over nodes (issue 23, item 4): within-node ratios only, two-stage
bootstrap, node-dependent answers, and no pooling across different machines. Synthetic
rounds with known true ratios stand in for the nodes' measurements."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.judge.pooling import FingerprintMismatch, NodeRounds, pool

FINGERPRINT = {"cpu": "AMD EPYC", "memory_gb": 23.4, "python": "3.11.7", "load_average": [0.1]}


def _node(
    node_id: str, speed: float, ratio: float, seed: int, rounds: int = 12, spread: float = 0.03
) -> NodeRounds:
    """Rounds on a node `speed` times slower than a 10 ms reference machine, the
    candidate `ratio` times the baseline's time, each round with its own noise."""
    rng = np.random.default_rng(seed)
    drift = 1 + rng.normal(0, spread, rounds)  # the machine's drift hits both alike
    base = 10.0 * speed * drift * (1 + rng.normal(0, spread / 2, rounds))
    cand = 10.0 * speed * ratio * drift * (1 + rng.normal(0, spread / 2, rounds))
    return NodeRounds(node_id, dict(FINGERPRINT), base, cand)


def test_within_node_ratios_pool_to_the_true_ratio_on_nodes_of_different_speeds() -> None:
    nodes = [_node("a", 1.0, 0.8, seed=1), _node("b", 1.5, 0.8, seed=2)]
    pooled = pool(nodes)
    assert pooled.ratio.lo <= 0.8 <= pooled.ratio.hi
    assert pooled.ratio.hi - pooled.ratio.lo < 0.05
    assert pooled.decision == "faster"
    assert set(pooled.per_node) == {"a", "b"}
    assert all(r == pytest.approx(0.8, abs=0.03) for r in pooled.per_node.values())


def test_pooling_absolute_times_would_have_been_biased() -> None:
    """As --split spreads candidates: this one was measured on the slower node only,
    the baseline on both. Its absolute time against the baseline's pooled absolute time
    mixes the nodes' speeds into the answer; its own node's ratio does not."""
    fast, slow = _node("a", 1.0, 0.8, seed=3), _node("b", 1.5, 0.8, seed=4)
    rng = np.random.default_rng(0)
    base_all = np.concatenate([fast.baseline, slow.baseline])
    absolute = []
    for _ in range(2000):
        cand = rng.choice(slow.candidate, len(slow.candidate)).mean()
        base = rng.choice(base_all, len(base_all)).mean()
        absolute.append(cand / base)
    lo, hi = np.percentile(absolute, [2.5, 97.5])
    # 0.8 x 1.5 / ((1 + 1.5) / 2) = 0.96: "4% faster" for a candidate 20% faster
    assert np.median(absolute) > 0.9 and not lo <= 0.8 <= hi
    within = pool([slow])
    assert within.ratio.lo <= 0.8 <= within.ratio.hi


def test_nodes_that_disagree_on_the_sign_give_node_dependent() -> None:
    pooled = pool([_node("a", 1.0, 0.8, seed=5), _node("b", 1.5, 1.25, seed=6)])
    assert pooled.decision == "node-dependent"
    assert "a 0.79" in pooled.why and "b 1.24" in pooled.why
    assert pooled.per_node["a"] < 1 < pooled.per_node["b"]


def test_a_gain_that_one_node_does_not_show_is_node_dependent() -> None:
    """30% faster on one node, no faster on the other: the pooled point says 17%, but a
    node of this type may well show none of it."""
    pooled = pool([_node("a", 1.0, 0.7, seed=12), _node("b", 1.5, 1.005, seed=13, spread=0.001)])
    assert pooled.ratio.value < 0.9 and pooled.per_node["b"] > 1
    assert pooled.decision == "node-dependent"


def test_the_same_speed_on_every_node_is_equivalent() -> None:
    pooled = pool([_node("a", 1.0, 1.0, seed=7), _node("b", 1.5, 1.0, seed=8)], margin=0.05)
    assert pooled.decision == "equivalent", pooled.why
    assert pooled.to_dict()["decision"] == "equivalent"


def test_a_fingerprint_mismatch_refuses_to_pool_and_names_the_field() -> None:
    a, b = _node("a", 1.0, 0.8, seed=9), _node("b", 1.0, 0.8, seed=10)
    b = NodeRounds("b", {**FINGERPRINT, "cpu": "Intel Xeon"}, b.baseline, b.candidate)
    with pytest.raises(FingerprintMismatch, match=r"nodes a and b differ in cpu \('AMD EPYC'"):
        pool([a, b])
    # what changes from minute to minute on any machine is not its identity
    c = _node("c", 1.0, 0.8, seed=11)
    c = NodeRounds("c", {**FINGERPRINT, "load_average": [3.0]}, c.baseline, c.candidate)
    assert pool([a, c]).decision == "faster"


def test_unpaired_or_empty_rounds_are_refused() -> None:
    with pytest.raises(ValueError, match="paired rounds"):
        NodeRounds("a", FINGERPRINT, np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="at least one node"):
        pool([])
