"""The quality gate judges every output a model returns, matched by name across
formats, and fails a variant on its worst output: real runs of real runtimes on
tiny models with several outputs."""

from __future__ import annotations

import textwrap
from pathlib import Path

from bakeoff import api

TWO_HEADS = textwrap.dedent(
    """
    import numpy as np
    import torch
    from sklearn.datasets import load_digits


    class TwoHeads(torch.nn.Module):
        # Class scores that INT8 keeps, and a head so sensitive to its input (a
        # sine of a large multiple) that INT8's rounding scrambles it.
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(64, 32)
            self.scores = torch.nn.Linear(32, 10)

        def forward(self, x):
            h = torch.relu(self.body(x))
            return {"scores": self.scores(h), "wobbly": torch.sin(300.0 * h)}


    def build():
        torch.manual_seed(0)
        return TwoHeads()


    def inputs():
        return (load_digits().data[:256] / 16.0).astype(np.float32)
    """
)


def _by_id(doc: dict) -> dict[str, dict]:
    return {c["id"]: c for c in doc["candidates"]}


def test_every_output_is_judged_by_name_and_a_variant_fails_on_its_worst(
    tmp_path: Path, store_path: Path
) -> None:
    (tmp_path / "two_heads.py").write_text(TWO_HEADS)
    wl = tmp_path / "workload.toml"
    wl.write_text(
        textwrap.dedent(
            """
            name = "two-heads"
            [model]
            kind = "torch"
            factory = "two_heads:build"
            [data]
            factory = "two_heads:inputs"
            [search]
            runtimes = ["torch", "onnxruntime"]
            precisions = ["fp32", "int8"]
            batch_sizes = [8]
            [quality.per_output.scores]
            metric = "agreement"
            max_drop = 0.05
            """
        )
    )
    doc = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=2)).document
    assert doc["workload"]["reference_outputs"]["outputs"] == ["scores", "wobbly"]
    cands = _by_id(doc)
    exact = cands["onnxruntime-fp32-b8"]
    assert exact["status"] == "ok", exact
    # The ONNX export names its outputs as the torch model does: matched by name.
    assert "matched" not in exact["quality"]
    figures = {o["output"]: o for o in exact["quality"]["outputs"]}
    assert figures["scores"]["metric"] == "agreement" and figures["wobbly"]["metric"] == "cosine"
    int8 = [c for i, c in cands.items() if i.startswith("onnxruntime-int8")]
    assert int8
    for c in int8:
        assert c["status"] == "rejected", c
        assert c["quality"]["output"] == "wobbly"
        assert "quality gate: output wobbly: cosine" in c["reason"]
        scores = next(o for o in c["quality"]["outputs"] if o["output"] == "scores")
        assert scores["drop"] <= scores["max_drop"]  # the class scores held


def test_a_savedmodel_and_openvinos_conversion_of_it_match_every_output_by_name(
    tf_models: Path, tmp_path: Path
) -> None:
    """TensorFlow returns a signature's outputs by key, OpenVINO in its own order;
    two of the three have one shape, so only the names pair them right."""
    from front_door import run_in_child
    from tf_models import HEADS_SAVEDMODEL

    flags = ("--quick", "--runtimes", "tensorflow,openvino", "--precisions", "fp32")
    flags += ("--batch-sizes", "2", "--budget", "2")
    store = ("--store", str(tmp_path / "s.db"))
    doc = run_in_child(tmp_path, "", str(tf_models / HEADS_SAVEDMODEL), *flags, *store)
    assert doc["workload"]["reference"] == "tensorflow-fp32"
    assert doc["workload"]["reference_outputs"]["outputs"] == ["contour", "note", "onset"]
    ov = _by_id(doc)["openvino-fp32-b2"]
    assert ov["status"] == "ok", ov
    assert "matched" not in ov["quality"]
    figures = {o["output"]: o["value"] for o in ov["quality"]["outputs"]}
    assert set(figures) == {"contour", "note", "onset"}
    assert min(figures.values()) > 0.9999
