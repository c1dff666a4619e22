"""A fourth kind of bake-off plugs into the shared parts with no edit outside its
own package (this one): it runs through the lifecycle, the engine and the store,
and `bakeoff show` shows it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bakeoff.trials.settings import TrialSettings
from front_door import call
from toy_kind import run_toy

SETTINGS = TrialSettings(
    threads=1,
    trial_timeout_s=60.0,
    warmup_s=0.0,
    warmup_calls=2,
    slice_s=0.01,
    settle_s=0.0,
    min_rounds=3,
    max_rounds=3,
    budget_s=60.0,
    seed=0,
    racing=False,
)


def test_a_toy_kind_runs_through_the_lifecycle_the_engine_the_store_and_show(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store" / "bakeoff.db"
    doc = run_toy(store, {"quick": 1.0, "slow": 3.0}, SETTINGS)
    assert doc["verdicts"][0]["winner"] == "quick"
    assert {c["status"] for c in doc["candidates"]} == {"ok"}
    with sqlite3.connect(store) as db:  # the lifecycle's row, and the engine's rounds
        assert db.execute("SELECT status FROM runs").fetchall() == [("done",)]
        rounds = db.execute("SELECT COUNT(*) FROM trials WHERE kind = 'measure'").fetchone()
    assert rounds[0] == 2 * SETTINGS.min_rounds
    shown = call("show", doc["run_id"], "--store", str(store))
    assert shown.code in (None, 0), shown.stderr
    said = " ".join(shown.stdout.split())
    assert "quick has the lowest median round." in said and "slow" in said
