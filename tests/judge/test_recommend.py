"""A tie resolved for the user: among candidates speed cannot separate, the one that
keeps the most quality, then needs the least memory, then starts fastest."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from bakeoff import api, export
from bakeoff.errors import UserError
from bakeoff.judge.recommend import Traits, pick
from bakeoff.serve.source import choose_candidate
from bakeoff.store import Store


def _workload(tmp_path: Path, a: str, b: str) -> Path:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", input=rng.random((64, 8), dtype=np.float32))
    path = tmp_path / "w.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            name = "fake-tie"
            [model]
            kind = "fake"
            [data]
            path = "d.npz"
            [quality]
            max_drop = 0.05
            [search]
            runtimes = ["fake"]
            batch_sizes = [1]
            [[candidates]]
            label = "a"
            runtime = "fake"
            options = {a}
            [[candidates]]
            label = "b"
            runtime = "fake"
            options = {b}
            """
        )
    )
    return path


@pytest.mark.parametrize("seed", range(2))
def test_a_tie_on_speed_is_resolved_by_quality_and_the_export_follows(
    tmp_path: Path, seed: int
) -> None:
    # Same speed; c keeps less quality. Whichever leads on speed, c is not taken.
    same = f"latency_ms = 2.0, jitter = 0.05, seed = {seed}"
    path = _workload(tmp_path, f"{{ {same} }}", f"{{ {same}, error = 0.2 }}")
    store = tmp_path / "s.db"
    result = api.run(str(path), api.RunOptions(quick=True, store=store))
    assert result.exit_code == 0
    doc = result.document
    drops = {c["id"]: c["quality"]["drop"] for c in doc["candidates"]}
    assert drops["b-b1"] > drops["a-b1"] + 1e-3, drops  # the fake's distortion shows
    (v,) = doc["verdicts"]
    assert v["ties"] and sorted(v["ties"][0]) == ["a-b1", "b-b1"], v["reason"]
    assert v["recommended"] == "a-b1"
    said = v["recommendation"]
    assert said.startswith("Speed alone does not separate ")
    assert "recommended: a-b1, by the smallest quality drop, then the smaller peak memory" in said
    assert "quality drop a-b1 " in said and "against b-b1 " in said
    assert said in v["points"]  # said with the verdict, statistics kept beside it
    assert v["winner"] in ("a-b1", "b-b1") and v["comparisons"]
    # export and serve take the recommendation (the fake runtime itself is not
    # exportable: the refusal names the candidate export took)
    with pytest.raises(UserError, match=r"^candidate a-b1: bakeoff export writes "):
        export.export(doc["run_id"], tmp_path / "out", store=store)
    with Store(store) as s:
        record = s.run(doc["run_id"])
    assert choose_candidate(record, 1, None)[0] == "a-b1"
    assert choose_candidate(record, None, None)[0] == "a-b1"


def test_a_separated_winner_is_the_recommendation_whatever_its_quality(tmp_path: Path) -> None:
    path = _workload(
        tmp_path,
        "{ latency_ms = 4.0, jitter = 0.02 }",
        "{ latency_ms = 1.0, jitter = 0.02, error = 0.2 }",
    )
    doc = api.run(str(path), api.RunOptions(quick=True, store=tmp_path / "s.db")).document
    (v,) = doc["verdicts"]
    assert v["winner"] == v["recommended"] == "b-b1"
    assert v["recommendation"] == "" and not v["ties"]


def test_each_step_narrows_within_its_tolerance_and_unknowns_are_kept() -> None:
    t = {
        "x": Traits(quality_drop=0.004, peak_memory_mb=100, cold_start_s=1.0),
        "y": Traits(quality_drop=0.00002, peak_memory_mb=300, cold_start_s=1.0),
        "z": Traits(quality_drop=0.00001, peak_memory_mb=200, cold_start_s=1.0),
    }
    # x loses on quality; y and z are equal on it (within 1e-4); z needs less memory
    choice, why = pick(["x", "y", "z"], t)
    assert choice == "z"
    assert why.startswith("quality drop ") and "against x 0.004" in why
    assert "peak memory z 200 MiB against y 300 MiB" in why
    # memory within 5% is equal: the cold start decides
    t2 = {
        "p": Traits(0.0, 100.0, 3.0),
        "q": Traits(0.0, 103.0, 1.0),
    }
    assert pick(["p", "q"], t2) == ("q", "cold start q 1 s against p 3 s")
    # nothing tells them apart: the fastest point estimate stays
    same = {"p": Traits(0.0, 100.0, 1.0), "q": Traits(0.0, 101.0, 1.05)}
    choice, why = pick(["p", "q"], same)
    assert choice == "p" and "fastest point estimate" in why
    # a figure not measured does not count against a candidate
    unknown = {"p": Traits(0.01, None, None), "q": Traits(None, None, None)}
    assert pick(["p", "q"], unknown)[0] == "p"
