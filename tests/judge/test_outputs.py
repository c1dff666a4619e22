"""Every output judged by name: matching a variant's outputs to the reference's,
the worst one failing the variant, and the files a worker saves them in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bakeoff.judge.outputs import (
    OutputRule,
    Unmatched,
    copy_named,
    judge_outputs,
    load_named,
    named_path,
    pair_outputs,
    save_named,
)
from bakeoff.judge.quality import Quality

RNG = np.random.default_rng(0)
SCORES = RNG.standard_normal((20, 5)).astype(np.float32)
BOXES = RNG.standard_normal((20, 4)).astype(np.float32)
MASK = RNG.standard_normal((20, 4)).astype(np.float32)
COSINE = OutputRule("cosine", 0.01)


def test_outputs_with_the_same_names_pair_by_name_whatever_their_order() -> None:
    reference = [("scores", SCORES), ("boxes", BOXES)]
    variant = [("boxes", BOXES), ("scores", SCORES)]
    pairing = pair_outputs(reference, variant)
    assert pairing.pairs == (("scores", "scores"), ("boxes", "boxes"))
    assert pairing.how == ""


def test_names_a_format_rewrites_pair_by_their_plain_form_and_say_so() -> None:
    reference = [("scores", SCORES), ("boxes", BOXES)]
    variant = [("serving_default_boxes:0", BOXES), ("Scores:0", SCORES)]
    pairing = pair_outputs(reference, variant)
    assert pairing.pairs == (("scores", "Scores:0"), ("boxes", "serving_default_boxes:0"))
    assert "scores = Scores:0" in pairing.how


def test_names_a_format_lost_pair_by_shape_then_position_and_say_so() -> None:
    reference = [("onset", BOXES), ("scores", SCORES), ("note", MASK)]
    variant = [("Call:0", SCORES), ("Call:1", BOXES), ("Call:2", MASK)]
    pairing = pair_outputs(reference, variant)
    assert dict(pairing.pairs) == {"onset": "Call:1", "scores": "Call:0", "note": "Call:2"}
    assert pairing.how.startswith("by shape and position")


def test_outputs_that_match_neither_by_name_nor_shape_are_refused_with_both_lists() -> None:
    reference = [("scores", SCORES), ("boxes", BOXES)]
    variant = [("a", SCORES), ("b", SCORES)]
    with pytest.raises(Unmatched, match=r"a, b\) and the reference 2 \(scores, boxes\)"):
        pair_outputs(reference, variant)


def test_one_output_each_pairs_whatever_the_names() -> None:
    assert pair_outputs([("output", SCORES)], [("logits", SCORES)]).pairs == (("output", "logits"),)


def test_the_variant_fails_on_its_worst_output_and_every_figure_is_kept() -> None:
    reference = [("scores", SCORES), ("boxes", BOXES)]
    broken = [("scores", SCORES), ("boxes", -BOXES)]
    q = judge_outputs(broken, reference, None, COSINE)
    assert not q.passed and q.output == "boxes"
    assert [o.output for o in q.outputs] == ["scores", "boxes"]
    assert q.outputs[0].passed and not q.outputs[1].passed
    assert q.describe().startswith("output boxes: cosine")
    assert "the worst of 2 outputs" in q.describe()


def test_only_the_named_outputs_are_judged_and_each_by_its_own_rule() -> None:
    reference = [("scores", SCORES), ("boxes", BOXES)]
    noisy = SCORES + 0.3 * RNG.standard_normal(SCORES.shape).astype(np.float32)
    variant = [("scores", noisy), ("boxes", -BOXES)]
    # The argmax of the scores mostly holds though their cosine drops: judged by
    # agreement with room for it, and the broken boxes left out, the variant passes.
    own = {"scores": OutputRule("agreement", 0.5)}
    q = judge_outputs(variant, reference, None, COSINE, only=["scores"], per_output=own)
    assert q.passed and q.metric == "agreement" and q.output == "scores"
    assert judge_outputs(variant, reference, None, COSINE, per_output=own).output == "boxes"


def test_a_single_output_model_keeps_the_figure_it_always_had() -> None:
    q = judge_outputs([("output", SCORES)], [("output", SCORES)], None, COSINE)
    assert q.output is None and q.outputs == () and q.passed


def test_per_output_figures_survive_the_document_round_trip() -> None:
    reference = [("scores", SCORES), ("boxes", BOXES)]
    variant = [("Call:0", SCORES), ("Call:1", -BOXES)]
    q = judge_outputs(variant, reference, None, COSINE)
    again = Quality.from_json(q.to_json())
    assert again == q
    assert q.to_json()["matched"].startswith("by shape and position")
    # A document written before outputs were named reads back as one output.
    old = {k: v for k, v in q.to_json().items() if k not in ("output", "outputs", "matched")}
    assert Quality.from_json(old).outputs == ()


def test_several_outputs_are_saved_beside_the_first_and_read_back_in_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c-b1.npy"
    save_named(path, [("scores", SCORES), ("boxes", BOXES)])
    np.testing.assert_array_equal(np.load(path), SCORES)  # what exports read
    got = load_named(path)
    assert [n for n, _ in got] == ["scores", "boxes"]
    np.testing.assert_array_equal(got[1][1], BOXES)
    copy_named(path, tmp_path / "copy.npy")
    assert [n for n, _ in load_named(tmp_path / "copy.npy")] == ["scores", "boxes"]
    # One output again: the stale file of several goes.
    save_named(path, [("output", SCORES)])
    assert not named_path(path).exists()
    assert [n for n, _ in load_named(path)] == ["output"]
