"""An interrupted text-generation run resumes under its own id (issue 51): the timed
rounds it had are kept, not measured again, and the rounds go on from there; a changed
model is refused. Real PyTorch on a tiny GPT-2 of the test's own. What happens after
the rounds on a resume (the sweep again, the server scenario's kept searches) is in
tests/generation/test_server_scenario.py and the module's docstring."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bakeoff import api
from bakeoff.cli import app
from bakeoff.errors import UserError
from bakeoff.generation.pipeline import _Events
from bakeoff.store import Store
from tiny_gpt2 import generation_workload


def _rows(store: Path, run_id: str, kind: str) -> list[tuple[str, int, float]]:
    with sqlite3.connect(store) as db:
        return db.execute(
            "SELECT candidate_id, round, recorded_at FROM trials WHERE run_id = ? AND kind = ? "
            "ORDER BY candidate_id, round",
            (run_id, kind),
        ).fetchall()


def test_an_interrupted_generative_run_resumes_without_timing_a_round_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wl = generation_workload(tmp_path)
    w = api.load_generation(str(wl))
    assert w is not None
    store = tmp_path / "s.db"
    timed: list[str] = []
    real_figures = _Events.figures

    def interrupted(self: _Events, entrant: Any, kind: str, extra: Any) -> None:
        timed.append(kind)  # after the round is stored, before the candidate has it
        if len(timed) == 3:
            raise KeyboardInterrupt  # Ctrl-C in the third timed round

    monkeypatch.setattr(_Events, "figures", interrupted)
    opts = api.GenerateOptions(
        runtimes=("torch",), quick=True, budget_s=3, concurrency=(), store=store
    )
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        api.run_generation(w, opts, said.append)
    run_id = said[0].split()[1].rstrip(":")
    assert f"if it is interrupted, `bakeoff run --resume {run_id} --store {store}`" in said[0]
    assert said[-1].startswith("interrupted: what finished is in the store")
    with Store(store) as s:
        record = s.run(run_id)
    assert record["status"] == "interrupted"
    (stored,) = record["candidates"]  # saved as it changed, for a resume and for show
    assert stored["id"] == "torch-fp32" and stored["settings"]["calls_per_round"] > 0
    before = _rows(store, run_id, "measure")
    assert [r for _, r, _ in before] == [0, 1, 2]
    assert len(_rows(store, run_id, "measure:ttft_ns")) == len(before)

    shown = CliRunner().invoke(app, ["show", run_id, "--store", str(store)])
    assert f"bakeoff run --resume {run_id}" in " ".join(shown.output.split())
    assert "torch-fp32: not finished" in shown.output

    # Another command's resume points here; a changed model is refused, the run kept.
    with pytest.raises(UserError, match=f"`bakeoff run --resume {run_id}` finishes it"):
        api.resume(run_id, store)
    extra = w.folder / "added.txt"
    extra.write_text("a file that was not there")
    with pytest.raises(UserError, match=r"the model in .* changed since run"):
        api.resume_generation(run_id, store)
    extra.unlink()

    monkeypatch.setattr(_Events, "figures", real_figures)
    out = tmp_path / "resumed.json"
    argv = ["run", "--resume", run_id, "--store", str(store), "--json", str(out)]
    resumed = CliRunner().invoke(app, argv)
    assert resumed.exit_code == 0, resumed.output
    assert "resuming: " in resumed.output and "timed rounds kept" in resumed.output
    doc = json.loads(out.read_text())
    assert doc["run_id"] == run_id
    (c,) = doc["candidates"]
    assert c["status"] == "ok", c["reason"]
    after = _rows(store, run_id, "measure")
    # The rounds timed before are there as they were, none timed twice.
    assert after[: len(before)] == before
    assert [r for _, r, _ in after] == list(range(len(after))) and len(after) >= 5
    with Store(store) as s:
        assert c["tpot_ms"]["n"] == sum(len(x) for x in s.samples(run_id, c["id"]))
    with Store(store) as s:
        assert s.run(run_id)["status"] == "done"
    with pytest.raises(UserError, match="already finished"):
        api.resume_generation(run_id, store)
