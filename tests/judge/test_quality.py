"""The quality gate: metrics against the FP32 reference."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.judge.quality import Quality, evaluate


def _ref(n: int = 40, k: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32)


# ---------------------------------------------------------------- cosine


def test_cosine_identical_outputs_drop_zero() -> None:
    ref = _ref()
    q = evaluate("cosine", ref.copy(), ref, None, max_drop=0.0)
    assert q.metric == "cosine"
    assert q.value == pytest.approx(1.0)
    assert q.reference == 1.0
    assert q.drop == pytest.approx(0.0, abs=1e-9)
    assert q.worst == pytest.approx(1.0)
    assert q.passed  # float noise must not fail an exact variant at max_drop 0


def test_cosine_counts_a_row_zero_in_both_as_the_same_answer() -> None:
    """A ReLU can zero a whole output row: the same zero row from a candidate is a
    match (found on a tiny Keras MLP, whose exact copy was rejected at cosine 0.875)."""
    ref = _ref(n=8)
    ref[0] = 0.0
    same = ref.copy()
    same[0] = 1e-12  # rounding, not an answer
    q = evaluate("cosine", same, ref, None, max_drop=0.0)
    assert q.value == pytest.approx(1.0) and q.passed
    assert evaluate("cosine", np.zeros((3, 4)), np.zeros((3, 4)), None, 0.0).passed
    wrong = ref.copy()
    wrong[0] = 1.0  # zero in the reference, an answer in the candidate: a difference
    q = evaluate("cosine", wrong, ref, None, max_drop=0.01)
    assert q.worst == pytest.approx(0.0) and not q.passed


def test_cosine_reports_worst_sample() -> None:
    ref = _ref(n=10)
    out = ref.copy()
    out[3] = -out[3]  # one sample points the opposite way
    q = evaluate("cosine", out, ref, None, max_drop=0.01)
    assert q.worst == pytest.approx(-1.0)
    assert q.value == pytest.approx((9 - 1) / 10)
    assert q.drop == pytest.approx(0.2)
    assert not q.passed


def test_cosine_flattens_trailing_axes() -> None:
    ref = np.random.default_rng(1).standard_normal((6, 3, 4))
    q = evaluate("cosine", ref * 2.0, ref, None, max_drop=0.0)  # scale does not matter
    assert q.drop == pytest.approx(0.0, abs=1e-9)
    assert q.passed


# ---------------------------------------------------------------- max_abs


def test_max_abs() -> None:
    ref = _ref()
    out = ref.copy()
    out[7, 2] += 0.25
    out[1, 0] -= 0.1
    q = evaluate("max_abs", out, ref, None, max_drop=0.3)
    assert q.metric == "max_abs"
    assert q.value == pytest.approx(0.25, abs=1e-6)
    assert q.drop == pytest.approx(0.25, abs=1e-6)
    assert q.reference == 0.0
    assert q.passed
    assert not evaluate("max_abs", out, ref, None, max_drop=0.2).passed


# ---------------------------------------------------------------- agreement / accuracy


def test_agreement_is_argmax_match_fraction() -> None:
    ref = np.eye(4)[[0, 1, 2, 3, 0, 1, 2, 3]]
    out = ref.copy()
    out[[1, 5]] = np.eye(4)[3]  # two of eight samples now predict class 3
    q = evaluate("agreement", out, ref, None, max_drop=0.3)
    assert q.value == pytest.approx(6 / 8)
    assert q.reference == 1.0
    assert q.drop == pytest.approx(2 / 8)
    assert q.passed
    assert not evaluate("agreement", out, ref, None, max_drop=0.2).passed


def test_accuracy_drop_is_reference_minus_variant() -> None:
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    ref_pred = labels.copy()
    ref_pred[0] = 1  # reference: 9/10 right
    out_pred = labels.copy()
    out_pred[[0, 1, 2]] = [1, 2, 0]  # variant: 7/10 right
    ref = np.eye(3)[ref_pred]
    out = np.eye(3)[out_pred]
    q = evaluate("accuracy", out, ref, labels, max_drop=0.25)
    assert q.reference == pytest.approx(0.9)
    assert q.value == pytest.approx(0.7)
    assert q.drop == pytest.approx(0.2)
    assert q.passed
    assert not evaluate("accuracy", out, ref, labels, max_drop=0.1).passed


def test_accuracy_can_improve_on_the_reference() -> None:
    labels = np.array([0, 1, 0, 1])
    ref = np.eye(2)[[1, 1, 0, 1]]  # 3/4
    out = np.eye(2)[labels]  # 4/4
    q = evaluate("accuracy", out, ref, labels, max_drop=0.0)
    assert q.drop == pytest.approx(-0.25)
    assert q.passed


def test_accuracy_without_labels_raises() -> None:
    ref = _ref()
    with pytest.raises(ValueError, match="labels"):
        evaluate("accuracy", ref, ref, None, max_drop=0.01)


# ---------------------------------------------------------------- errors and NaN


def test_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="shape"):
        evaluate("cosine", np.zeros((4, 3)), np.zeros((4, 2)), None, max_drop=0.01)
    with pytest.raises(ValueError, match="shape"):
        evaluate("max_abs", np.zeros((3, 2)), np.zeros((4, 2)), None, max_drop=0.01)


def test_unknown_metric_raises() -> None:
    ref = _ref()
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate("f1", ref, ref, None, max_drop=0.01)


@pytest.mark.parametrize("metric", ["cosine", "max_abs"])
def test_all_nan_outputs_do_not_pass(metric: str) -> None:
    ref = _ref()
    out = np.full_like(ref, np.nan)
    q = evaluate(metric, out, ref, None, max_drop=0.5)
    assert not q.passed
    assert q.non_finite == len(ref)
    assert "NaN or inf" in q.describe()


@pytest.mark.parametrize("metric", ["cosine", "max_abs"])
def test_one_nan_sample_in_small_holdout_fails(metric: str) -> None:
    ref = _ref()
    out = ref.copy()
    out[5, 1] = np.nan
    assert not evaluate(metric, out, ref, None, max_drop=0.01).passed


def test_one_nan_sample_in_large_holdout_fails_cosine() -> None:
    ref = _ref(n=1000)
    out = ref.copy()
    out[5, 1] = np.nan
    assert not evaluate("cosine", out, ref, None, max_drop=0.01).passed


def test_inf_outputs_do_not_pass_max_abs() -> None:
    ref = _ref()
    out = ref.copy()
    out[0, 0] = np.inf
    q = evaluate("max_abs", out, ref, None, max_drop=1e6)
    assert q.drop == float("inf")
    assert not q.passed


@pytest.mark.parametrize("metric", ["agreement", "accuracy"])
def test_nan_outputs_do_not_pass_argmax_metrics(metric: str) -> None:
    ref = np.eye(3)[[0, 0, 0, 0, 0, 0]]
    labels = np.zeros(6, dtype=np.int64)
    out = np.full_like(ref, np.nan)
    assert not evaluate(metric, out, ref, labels, max_drop=0.01).passed


# ---------------------------------------------------------------- passed / describe


def test_passed_honours_max_drop() -> None:
    assert Quality("cosine", 0.99, 1.0, 0.01, max_drop=0.01).passed  # at the limit
    assert Quality("cosine", 0.99, 1.0, 0.01 + 1e-12, max_drop=0.01).passed  # float noise
    assert not Quality("cosine", 0.98, 1.0, 0.0101, max_drop=0.01).passed
    assert not Quality("cosine", 0.0, 1.0, float("nan"), max_drop=10.0).passed
    assert Quality("max_abs", 0.0, 0.0, 0.0, max_drop=0.0).passed


def test_describe_and_to_json() -> None:
    q = Quality("cosine", 0.95, 1.0, 0.05, max_drop=0.01, worst=0.5)
    assert "exceeds max_drop 0.01" in q.describe()
    d = q.to_json()
    assert d == {
        "metric": "cosine",
        "value": 0.95,
        "reference": 1.0,
        "drop": 0.05,
        "max_drop": 0.01,
        "worst": 0.5,
        "non_finite": 0,
    }
