"""An interrupted or killed training run resumes under its own id without redoing
the timed rounds or any seed trained to its end, and refuses to resume when the
recipe changed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bakeoff import api
from bakeoff.cli import app
from bakeoff.errors import UserError
from bakeoff.store import Store
from bakeoff.trials.launcher import LocalLauncher
from short_recipe import write_mlp_and_digits

RECIPE = """name = "mlp-resume"
[model]
kind = "torch"
factory = "mlp:build"
[train]
data = "d.npz"
optimizer = "sgd"
lr = {lr}
schedule = "linear"
steps = 20
eval_every = 10
tolerance = 0.3
stacks = ["torch", "torch-accumulate"]
target = {{ value = 0.3 }}
"""


def _recipe(folder: Path, lr: float = 0.1) -> Path:
    write_mlp_and_digits(folder)
    path = folder / "recipe.toml"
    path.write_text(RECIPE.format(lr=lr))
    return path


@pytest.mark.slow  # three stacks trained twice over (~40 s of CPU); make test keeps the
# command's resume by id and inference's resume of an interrupted run (test_racing)
def test_an_interrupted_training_run_resumes_without_redoing_what_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe, store = _recipe(tmp_path), tmp_path / "s.db"
    trained: list[str] = []
    real_run = LocalLauncher.run

    def interrupted_at(name: str | None) -> Any:
        def run(self: LocalLauncher, job: Any, label: str, timeout_s: float) -> Any:
            if label == name:
                raise KeyboardInterrupt  # Ctrl-C while this seed trains
            trained.append(label)
            return real_run(self, job, label, timeout_s)

        return run

    monkeypatch.setattr(LocalLauncher, "run", interrupted_at("torch-accumulate-seed0"))
    said: list[str] = []
    opts = api.TrainOptions(seeds=2, budget_s=2, store=store, quick=True)
    try:
        api.train(str(recipe), opts, said.append)
    except KeyboardInterrupt:
        pass
    else:  # torch-accumulate never reached its seeds: say why the run thought so
        pytest.fail("no seed of torch-accumulate was trained:\n" + "\n".join(said))
    assert trained == ["torch-seed0", "torch-seed1"]
    run_id = said[0].split()[1].rstrip(":")
    assert f"`bakeoff train --resume {run_id} --store {store}`" in said[0]
    assert "finishes the run" in said[-1]
    with Store(store) as s:
        assert s.run(run_id)["status"] == "interrupted"
        s.mark_running(run_id)  # as a SIGKILL leaves it: still "running", no process
    shown = CliRunner().invoke(app, ["show", run_id, "--store", str(store)])
    assert f"bakeoff train --resume {run_id}" in " ".join(shown.output.split())
    progress = json.loads((tmp_path / "runs" / run_id / "progress.json").read_text())
    kept = progress["seeds"]["torch"]

    # The inference resume points at the training one; a changed recipe is refused.
    with pytest.raises(UserError, match=f"`bakeoff train --resume {run_id}` finishes it"):
        api.resume(run_id, store)
    recipe.write_text(RECIPE.format(lr=0.2))
    with pytest.raises(UserError, match="changed since run"):
        api.resume_training(run_id, store)
    recipe.write_text(RECIPE.format(lr=0.1))

    # Resumed: no timed round again, only the two seeds that had not finished.
    trained.clear()
    monkeypatch.setattr(LocalLauncher, "run", interrupted_at(None))

    def no_rounds(*args: Any) -> None:
        raise AssertionError("the finished rounds were timed again")

    monkeypatch.setattr("bakeoff.training.pipeline.run_trials", no_rounds)
    said.clear()
    result = api.resume_training(run_id, store, said.append)
    assert trained == ["torch-accumulate-seed0", "torch-accumulate-seed1"]
    assert any("resuming: the timed rounds finished before, and 2 seed(s)" in s for s in said)
    doc = result.document
    assert doc["run_id"] == run_id and doc["workload"]["lr_schedule"] == "linear"
    by = {c["id"]: c for c in doc["candidates"]}
    for c in by.values():
        assert c["status"] == "ok", c["reason"]
        assert [s["seed"] for s in c["seeds"]] == [0, 1]
        assert c["samples_per_s"]["value"] > 0 and c["checkpoint"]["reload_identical"]
    # The seeds kept are the very ones the interrupted run trained.
    assert [s["final_metric"] for s in by["torch"]["seeds"]] == [s["final_metric"] for s in kept]
    with Store(store) as s:
        assert s.run(run_id)["status"] == "done"
    with pytest.raises(UserError, match="already finished"):
        api.resume_training(run_id, store)


def test_the_command_resumes_by_id_alone_and_says_so_with_exit_2(tmp_path: Path) -> None:
    def train(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "bakeoff.cli", "train", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    both = train("builtin:digits-train", "--resume", "x", "--store", str(tmp_path / "s.db"))
    assert both.returncode == 2 and "give no RECIPE" in both.stderr
    neither = train("--store", str(tmp_path / "s.db"))
    assert neither.returncode == 2 and "or --resume RUN_ID" in neither.stderr
    assert "Traceback" not in both.stderr + neither.stderr
