"""Statistics and verdicts on synthetic timings: no processes, no runtimes."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.judge import stats
from bakeoff.judge.verdict import Measured, Verdict, decide, objective_for


def _lognormal_ns(seed: int, rounds: int, calls: int, median_ms: float, sigma: float = 0.1):
    rng = np.random.default_rng(seed)
    ms = median_ms * rng.lognormal(0.0, sigma, size=(rounds, calls))
    return (ms * 1e6).astype(np.int64)


def _measured(cid: str, samples_ns: np.ndarray, batch_size: int = 1, gap_ns: int = 0) -> Measured:
    """A record whose timed blocks last the sum of their calls plus `gap_ns` per call."""
    block = samples_ns.sum(axis=1) + gap_ns * samples_ns.shape[1]
    return Measured(cid, samples_ns, block.astype(np.int64), batch_size)


# ---------------------------------------------------------------- percentiles


@pytest.mark.parametrize("kind", ["lognormal", "integers with ties", "a few calls a round"])
def test_the_replicates_order_statistics_are_numpys_on_the_gathered_replicates(kind: str) -> None:
    """The bootstrap finds each replicate's percentiles without building it: the
    figures must be what np.percentile and np.median give on the replicates built."""
    rng = np.random.default_rng(7)
    for trial in range(6):
        rounds = int(rng.integers(1, 30))
        if kind == "lognormal":
            samples = rng.lognormal(0.0, 0.3, (rounds, int(rng.integers(50, 200)))) * 1e6
        elif kind == "integers with ties":
            samples = rng.integers(0, 12, (rounds, int(rng.integers(1, 200)))).astype(float)
        else:
            samples = np.round(rng.normal(5.0, 1.0, (rounds, int(rng.integers(1, 4)))), 1)
        samples = stats._thin(samples)
        slots = rng.integers(0, 3, rounds) if trial % 2 else None
        idx = stats._resample(rounds, slots)
        built = samples[idx].reshape(len(idx), -1)
        replicates = stats._Replicates(samples, idx)
        for q in (0, 37.5, 50, 90, 99, 100):
            assert np.array_equal(replicates.percentile(q), np.percentile(built, q, axis=1))
        assert np.array_equal(replicates.median(), np.median(built, axis=1))
        assert np.allclose(replicates.mean(), built.mean(axis=1), rtol=1e-12, atol=0)


def test_latency_percentiles_point_values_and_cis() -> None:
    samples = _lognormal_ns(1, rounds=20, calls=50, median_ms=2.0)
    pct = stats.latency_percentiles(samples)
    assert set(pct) == {"p50", "p90", "p99", "mean"}
    flat_ms = samples.reshape(-1) / 1e6
    assert pct["p50"].value == pytest.approx(np.percentile(flat_ms, 50))
    assert pct["p90"].value == pytest.approx(np.percentile(flat_ms, 90))
    assert pct["p99"].value == pytest.approx(np.percentile(flat_ms, 99))
    assert pct["mean"].value == pytest.approx(flat_ms.mean())
    assert pct["p50"].value == pytest.approx(2.0, rel=0.02)  # the true median, in ms
    for name, iv in pct.items():
        assert iv.lo <= iv.value <= iv.hi, name
        assert iv.hi > iv.lo, name  # a real interval, not a point
    assert pct["p50"].value < pct["p90"].value < pct["p99"].value


def test_latency_cis_narrow_with_more_samples() -> None:
    few = stats.latency_percentiles(_lognormal_ns(2, rounds=8, calls=10, median_ms=2.0))
    many = stats.latency_percentiles(_lognormal_ns(2, rounds=80, calls=100, median_ms=2.0))
    for name in ("p50", "p90", "mean"):
        width_few = few[name].hi - few[name].lo
        width_many = many[name].hi - many[name].lo
        assert width_many < width_few / 3, name


def test_block_bootstrap_widens_ci_when_rounds_drift() -> None:
    """Drift between rounds must widen the interval, not be averaged away."""
    rng = np.random.default_rng(3)
    steady = 1e6 * (1 + 0.05 * rng.standard_normal((20, 50)))
    drift = steady * np.linspace(0.8, 1.2, 20)[:, None]
    w_steady = stats.latency_percentiles(steady.astype(np.int64))["p50"]
    w_drift = stats.latency_percentiles(drift.astype(np.int64))["p50"]
    assert (w_drift.hi - w_drift.lo) > 3 * (w_steady.hi - w_steady.lo)


def test_interval_widens_to_include_point() -> None:
    iv = stats.Interval(5.0, 1.0, 2.0)
    assert (iv.lo, iv.value, iv.hi) == (1.0, 5.0, 5.0)
    assert iv.excludes(0.5) and iv.excludes(5.5)
    assert not iv.excludes(3.0)


def test_unsupported_percentiles() -> None:
    assert "p99" in stats.unsupported_percentiles(50)
    assert "p50" not in stats.unsupported_percentiles(50)
    assert "p90" not in stats.unsupported_percentiles(50)
    assert stats.unsupported_percentiles(10) == ["p90", "p99"]
    assert set(stats.unsupported_percentiles(3)) == {"p50", "p90", "p99", "mean"}
    assert stats.unsupported_percentiles(200) == []


# ---------------------------------------------------------------- throughput


def test_throughput_is_samples_over_seconds() -> None:
    calls = np.array([10, 10, 10, 10, 10])
    block_ns = np.array([100, 100, 100, 100, 100]) * 1_000_000  # 0.1 s each
    thr = stats.throughput(calls, block_ns, batch_size=4)
    # 5 * 10 calls * 4 samples in 0.5 s
    assert thr.value == pytest.approx(400.0)
    assert thr.lo == pytest.approx(400.0) and thr.hi == pytest.approx(400.0)


def test_throughput_uses_total_time_not_mean_of_rates() -> None:
    calls = np.array([10, 10])
    block_ns = np.array([1e9, 3e9])
    thr = stats.throughput(calls, block_ns, batch_size=2)
    assert thr.value == pytest.approx(40 / 4.0)  # not mean(20, 6.67)
    assert thr.lo <= thr.value <= thr.hi
    assert thr.lo >= 40 / 6.0 - 1e-9 and thr.hi <= 40 / 2.0 + 1e-9


# ---------------------------------------------------------------- paired ratios


def test_paired_ratio_of_identical_distributions_includes_one() -> None:
    base = _lognormal_ns(10, rounds=20, calls=40, median_ms=1.5)
    cand = _lognormal_ns(11, rounds=20, calls=40, median_ms=1.5)
    ratio = stats.paired_latency_ratio(base, cand)
    assert ratio.value == pytest.approx(1.0, abs=0.03)
    assert not ratio.excludes(1.0)


def test_paired_ratio_of_the_same_samples_is_exactly_one() -> None:
    base = _lognormal_ns(12, rounds=10, calls=20, median_ms=1.0)
    ratio = stats.paired_latency_ratio(base, base.copy())
    assert ratio.value == ratio.lo == ratio.hi == 1.0


def test_paired_ratio_of_twice_faster_candidate() -> None:
    base = _lognormal_ns(20, rounds=20, calls=40, median_ms=2.0)
    cand = _lognormal_ns(21, rounds=20, calls=40, median_ms=1.0)
    ratio = stats.paired_latency_ratio(base, cand)
    assert ratio.value == pytest.approx(2.0, rel=0.05)
    assert ratio.excludes(1.0)
    assert ratio.lo > 1.5 and ratio.hi < 2.5


def test_paired_ratio_pairs_round_drift() -> None:
    """Drift shared by both candidates cancels in the paired ratio."""
    rng = np.random.default_rng(30)
    drift = np.linspace(0.5, 2.0, 20)[:, None]
    base = (2e6 * drift * rng.lognormal(0, 0.02, (20, 30))).astype(np.int64)
    cand = (1e6 * drift * rng.lognormal(0, 0.02, (20, 30))).astype(np.int64)
    ratio = stats.paired_latency_ratio(base, cand)
    assert ratio.value == pytest.approx(2.0, rel=0.05)
    assert ratio.excludes(1.0)


def test_paired_throughput_ratio() -> None:
    calls = np.full(10, 20)
    base_block = np.full(10, 2e9)
    cand_block = np.full(10, 1e9)
    ratio = stats.paired_throughput_ratio(calls, base_block, calls, cand_block)
    assert ratio.value == pytest.approx(2.0)
    assert ratio.excludes(1.0)


# ---------------------------------------------------------------- verdicts


def test_decide_picks_the_fastest() -> None:
    slow = _measured("torch-fp32-b1", _lognormal_ns(40, 15, 30, 3.0))
    mid = _measured("ort-fp32-b1", _lognormal_ns(41, 15, 30, 2.0))
    fast = _measured("ov-int8-b1", _lognormal_ns(42, 15, 30, 1.0))
    v = decide(1, "latency", [slow, mid, fast], "torch-fp32-b1")
    assert isinstance(v, Verdict)
    assert v.winner == "ov-int8-b1"
    assert v.ranking == ["ov-int8-b1", "ort-fp32-b1", "torch-fp32-b1"]
    assert v.ties == []
    assert v.baseline == "torch-fp32-b1"
    assert v.speedup is not None
    assert v.speedup.value == pytest.approx(3.0, rel=0.05)
    assert v.speedup.excludes(1.0)
    assert v.standing == "clear" and v.beats_baseline
    assert v.headline.startswith("ov-int8-b1 is fastest: 2.99× (CI ")
    assert v.headline.endswith(" over the baseline torch-fp32-b1.")
    assert v.points == []
    d = v.to_dict()
    assert d["winner"] == "ov-int8-b1"
    assert d["speedup"]["value"] == v.speedup.value
    assert d["speedup"]["ci95"] == [v.speedup.lo, v.speedup.hi]


def test_decide_reports_ties_for_equal_distributions() -> None:
    base = _measured("torch-fp32-b1", _lognormal_ns(50, 15, 30, 3.0))
    a = _measured("ort-fp32-b1", _lognormal_ns(51, 15, 30, 1.0))
    b = _measured("ort-int8-b1", _lognormal_ns(52, 15, 30, 1.0))
    v = decide(1, "latency", [base, a, b], "torch-fp32-b1")
    assert v.winner in ("ort-fp32-b1", "ort-int8-b1")
    assert len(v.ties) == 1
    assert sorted(v.ties[0]) == ["ort-fp32-b1", "ort-int8-b1"]
    assert v.ties[0][0] == v.winner
    other = v.ties[0][1]
    assert v.standing == "leads"
    assert v.headline.startswith(f"{v.winner} leads, but is not yet separated from {other}; ")
    assert "over the baseline torch-fp32-b1" in v.headline  # it did beat the baseline
    assert v.points[0].startswith(f"{other} is not separated from {v.winner}, which measured ")
    assert "margin" in v.points[0]
    assert "pairs of worker processes" not in v.reason  # not a close call held back
    assert "torch-fp32-b1" not in v.ties[0]  # the clearly slower baseline is not tied
    assert v.ranking[-1] == "torch-fp32-b1"


def test_decide_when_every_candidate_is_tied_with_the_baseline() -> None:
    base = _measured("torch-fp32-b1", _lognormal_ns(57, 15, 30, 1.0))
    a = _measured("ort-fp32-b1", _lognormal_ns(58, 15, 30, 1.0))
    b = _measured("ov-fp32-b1", _lognormal_ns(59, 15, 30, 1.0))
    v = decide(1, "latency", [base, a, b], "torch-fp32-b1")
    assert v.standing in ("baseline-tied", "baseline-leads") and v.beats_baseline is False
    assert len(v.ties[0]) == 3
    if v.standing == "baseline-tied":
        assert v.headline == (
            "No candidate beat the baseline torch-fp32-b1: none of the 3 candidates is "
            f"separated from the leader {v.winner}."
        )
    else:
        assert v.headline.startswith("No candidate beat the baseline torch-fp32-b1: it leads")
    assert "×" not in v.headline
    assert len([p for p in v.points if "is not separated from" in p]) == 2
    assert v.points[-1].startswith("On speed alone nothing here pays for leaving the baseline")
    d = v.to_dict()
    assert [c["decision"] for c in d["comparisons"]] != ["faster", "faster"]
    assert d["level"] == pytest.approx(0.975) and d["margin"] == 0.02


def test_decide_when_winner_is_the_baseline() -> None:
    base = _measured("torch-fp32-b1", _lognormal_ns(55, 15, 30, 1.0))
    other = _measured("ort-fp32-b1", _lognormal_ns(56, 15, 30, 2.0))
    v = decide(1, "latency", [base, other], "torch-fp32-b1")
    assert v.winner == "torch-fp32-b1"
    assert v.speedup is not None and v.speedup.value == 1.0
    assert v.standing == "baseline-leads"
    assert v.headline == "The baseline torch-fp32-b1 is fastest: no candidate beat it."


def test_decide_without_baseline_gives_no_speedup() -> None:
    a = _measured("ort-fp32-b1", _lognormal_ns(60, 15, 30, 2.0))
    b = _measured("ort-int8-b1", _lognormal_ns(61, 15, 30, 1.0))
    v = decide(
        1, "latency", [a, b], "torch-fp32-b1", not_ok={"torch-fp32-b1": "failed: out of memory"}
    )
    assert v.winner == "ort-int8-b1"
    assert v.speedup is None
    assert v.to_dict()["speedup"] is None
    assert v.standing == "no-baseline" and v.beats_baseline is None
    assert v.headline == (
        "ort-int8-b1 is fastest; no speedup is given because the baseline torch-fp32-b1 "
        "is out (failed: out of memory)."
    )


def test_decide_with_nothing_measured() -> None:
    v = decide(
        32,
        "throughput",
        [],
        "torch-fp32-b32",
        not_ok={"torch-fp32-b32": "failed: boom", "ort-int8-b32": "rejected: quality gate"},
    )
    assert v.winner is None
    assert v.ranking == []
    assert v.speedup is None
    assert v.standing == "none"
    assert v.headline == "No candidate completed with acceptable quality."
    assert v.reason.startswith("Batch 32 (throughput): No candidate completed")
    assert v.points == ["torch-fp32-b32: failed: boom.", "ort-int8-b32: rejected: quality gate."]


def test_verdict_requires_reason_and_ranked_winner() -> None:
    with pytest.raises(ValueError):
        Verdict(1, "latency", None, None, None, [], [], "")
    with pytest.raises(ValueError):
        Verdict(1, "latency", "x", None, None, ["y"], [], "because")


def test_objective_for() -> None:
    assert objective_for(1, "auto") == "latency"
    assert objective_for(32, "auto") == "throughput"
    assert objective_for(32, "latency") == "latency"
    assert objective_for(1, "throughput") == "throughput"


def test_decide_uses_throughput_objective_above_batch_1() -> None:
    """A has the lower per-call latency, but B finishes more samples per second."""
    a_samples = _lognormal_ns(70, 15, 30, 1.0, sigma=0.02)
    b_samples = _lognormal_ns(71, 15, 30, 1.2, sigma=0.02)
    a = _measured("a-b32", a_samples, batch_size=32, gap_ns=1_000_000)  # 2 ms per call in all
    b = _measured("b-b32", b_samples, batch_size=32)
    objective = objective_for(32, "auto")
    assert objective == "throughput"
    v = decide(32, objective, [a, b], "a-b32")
    assert v.objective == "throughput"
    assert v.winner == "b-b32"
    assert v.reason.startswith("Batch 32 (throughput): b-b32 is fastest")
    assert v.speedup is not None
    assert v.speedup.value == pytest.approx(2.0 / 1.2, rel=0.05)
    # the same records judged on latency go the other way
    assert decide(32, "latency", [a, b], "a-b32").winner == "a-b32"


def test_process_effect_widens_the_paired_ci_when_rounds_name_their_process() -> None:
    from bakeoff.judge import stats as st

    rng = np.random.default_rng(1)
    rounds = 20
    slots = np.array([0] * 5 + [1, 0] * 7 + [1])[:rounds]
    # the same model twice; A's second process happens to run 4% slower
    a = (
        np.where(slots[:, None] == 0, 1.0, 1.04)
        * 1e6
        * (1 + 0.01 * rng.standard_normal((rounds, 50)))
    )
    b = 1e6 * (1 + 0.01 * rng.standard_normal((rounds, 50)))
    flat = st.paired_latency_ratio(a, b)
    nested = st.paired_latency_ratio(a, b, slots=st.pair_slots(slots, slots, rounds))
    assert nested.value == flat.value
    assert (nested.hi - nested.lo) > 1.3 * (flat.hi - flat.lo)
    assert flat.lo > 1.0  # one process per candidate: a "difference" that is not real
    assert nested.lo < 1.0  # processes resampled: no longer significant


def _by_process(
    cid: str, slots: list[int], factor: dict[int, float], seed: int, median_ms: float = 1.0
) -> Measured:
    """Tight samples, each round scaled by the factor of the process that ran it."""
    samples = _lognormal_ns(seed, len(slots), 50, median_ms, sigma=0.005)
    scaled = (samples * np.array([factor[s] for s in slots])[:, None]).astype(np.int64)
    return Measured(cid, scaled, scaled.sum(axis=1), 1, np.array(slots))


def test_a_close_call_needs_three_process_pairs_that_agree() -> None:
    from bakeoff.judge.thresholds import CLOSE_CALL_PROCESSES
    from bakeoff.judge.verdict import judge

    assert CLOSE_CALL_PROCESSES == 3
    two = [0] * 5 + [1, 0, 1, 0]
    three = [*two, 2, 1, 0, 2]

    def fast(slots: list[int]) -> Measured:
        return _by_process("fast", slots, {0: 1.0, 1: 1.0, 2: 1.0}, 2)

    # slow is 4% slower in every one of its processes: a real but close gap
    slow = _by_process("slow", two, {0: 1.04, 1: 1.04, 2: 1.04}, 1)
    j = judge(slow, fast(two), "latency", 0.95, 0.02)
    assert j.ratio.lo > 1.02  # the bootstrap alone would call it
    assert j.decision == "undecided" and j.needs_processes
    assert "needs 3 pairs of processes that agree, and 2 had 2+ rounds" in j.why
    slow = _by_process("slow", three, {0: 1.04, 1: 1.04, 2: 1.04}, 1)
    j = judge(slow, fast(three), "latency", 0.95, 0.02)
    assert (j.decision, j.why, j.needs_processes) == ("faster", "", False)
    # Five pairs show a gap and one does not: the pooled CI, which cannot often
    # draw that one pair for the largest share of rounds, would call it anyway.
    many = [0] * 4 + [1, 2, 3, 4, 5, 0] * 2
    slow = _by_process("slow", many, {0: 1.06, 1: 1.06, 2: 1.06, 3: 1.06, 4: 1.06, 5: 1.01}, 1)
    j = judge(
        slow, _by_process("fast", many, dict.fromkeys(range(6), 1.0), 2), "latency", 0.8, 0.02
    )
    assert j.ratio.lo > 1.02
    assert j.decision == "undecided" and not j.needs_processes
    assert j.why.startswith("its process pairs disagree (ratios 1.06")
    assert j.why.endswith(", 1.011; margin 2%)")
    # a gap beyond the close-call zone is decided on one process each
    slow = _by_process("slow", [0] * 5, {0: 1.5}, 1)
    j = judge(slow, _by_process("fast", [0] * 5, {0: 1.0}, 2), "latency", 0.95, 0.02)
    assert j.decision == "faster" and j.ratio.lo > 1.1


def test_a_close_call_on_two_processes_each_is_a_tie_that_says_why() -> None:
    slots = [0] * 5 + [1, 0, 1, 0]
    a = _by_process("a", slots, {0: 1.04, 1: 1.04}, 1)
    b = _by_process("b", slots, {0: 1.0, 1: 1.0}, 2)
    v = decide(1, "latency", [a, b], "a")
    assert v.winner == "b" and v.ties == [["b", "a"]]
    assert v.speedup is not None and v.speedup.lo > 1.02  # the pooled CI alone would call it
    # a is the baseline: b is not separated from it, so no speedup is claimed
    assert v.standing == "baseline-tied" and v.beats_baseline is False
    assert v.headline == (
        "No candidate beat the baseline a: the leader b is not yet separated from it."
    )
    assert v.points[0].startswith("the baseline a is not separated from b, which measured 1.04× ")
    assert v.points[0].endswith(
        "): a gap under 10% counts only when 3 pairs of worker processes each show "
        "it, and 2 pairs had 2+ rounds."
    )
    # its CI does clear the margin, so no sentence may say it does not
    assert "within the 2% margin" not in v.reason


def test_shared_drift_splits_the_machines_spread_from_the_runtimes() -> None:
    machine = np.array([1.0, 1.3, 1.0, 1.25, 0.95, 1.3])  # every candidate's rounds move so
    rng = np.random.default_rng(1)

    def rounds(base: float, own: float = 0.01) -> np.ndarray:
        return base * machine * rng.lognormal(0.0, own, len(machine))

    others = [rounds(50.0), rounds(80.0), rounds(20.0)]
    shared = stats.shared_drift(rounds(100.0), others)
    assert shared is not None
    assert shared.machine_cv > 0.1 and shared.own_cv < 0.03
    # a candidate whose spread the others do not have keeps it as its own
    lone = 100.0 * np.array([1.0, 0.7, 1.3, 0.8, 1.2, 0.75])
    alone = stats.shared_drift(lone, others)
    assert alone is not None and alone.own_cv > 0.2
    # one other candidate is enough to tell; none, or one round in common, is not
    assert stats.shared_drift(rounds(100.0), others[:1]) is not None
    assert stats.shared_drift(rounds(100.0), []) is None
    assert stats.shared_drift(rounds(100.0), [np.array([50.0])]) is None
    # a candidate raced out early shares only its first rounds: later ones count as 1
    short = stats.shared_drift(rounds(100.0), [rounds(50.0)[:3]])
    assert short is not None
