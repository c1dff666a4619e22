"""A stored run as the HTML/Markdown reports and `bakeoff compare` read it: the
result document plus each candidate's raw measured rounds from the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import read_split, split_names
from bakeoff.errors import UserError
from bakeoff.judge.verdict import Measured, objective_for
from bakeoff.paths import DEFAULT_STORE, RunFolder, resume_command
from bakeoff.store import Store, refuse_generative


def status_label(c: dict[str, Any]) -> str:
    """A candidate's status, with its validity where a measured result is not to be
    taken as it is (docs/method.md rule 10: flag it rather than print it as if fine)."""
    if c["status"] == "ok" and c.get("validity") in ("noisy", "invalid"):
        return f"ok, {c['validity']}"
    return str(c["status"])


def flagged(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Measured candidates whose results are noisy or invalid (see `validity_reason`)."""
    return [c for c in candidates if status_label(c) != c["status"]]


@dataclass
class StoredRun:
    record: dict[str, Any]  # Store.run(): run_id, status, environment, settings, document, ...
    rounds: dict[str, list[tuple[int, list[int], int, int]]] = field(default_factory=dict)
    warmup_calls: dict[str, int] = field(default_factory=dict)
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    store: Path = DEFAULT_STORE  # where it was read from: its resume command names it

    @property
    def run_id(self) -> str:
        return str(self.record["run_id"])

    @property
    def document(self) -> dict[str, Any] | None:
        return self.record["document"]

    @property
    def candidates(self) -> list[dict[str, Any]]:
        """The final candidate documents, or those stored so far for an unfinished run."""
        doc = self.document
        return list(doc["candidates"] if doc else self.record["candidates"])

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        doc = self.document
        return list(doc["verdicts"]) if doc else []

    @property
    def environment(self) -> dict[str, Any]:
        return dict(self.record["environment"])

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.record["settings"])

    @property
    def resume_command(self) -> str:
        """What finishes the run (an inference or a training run's own command)."""
        return resume_command(self.run_id, self.store, self.settings.get("kind", "run"))

    def objective(self, batch_size: int) -> str:
        """The objective the run's verdict used for this batch size."""
        for v in self.verdicts:
            if v["batch_size"] == batch_size:
                return str(v["objective"])
        return objective_for(batch_size, str(self.settings.get("objective", "auto")))

    def samples_ns(self, candidate_id: str) -> np.ndarray:
        """Every measured latency of a candidate, flat, in ns."""
        rows = self.rounds.get(candidate_id, [])
        if not rows:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.asarray(lat, dtype=np.int64) for _, lat, _, _ in rows])

    def measured(self, candidate: dict[str, Any]) -> Measured | None:
        """The candidate's rounds as the verdict used them; None without full rounds."""
        rows = self.rounds.get(candidate["id"], [])
        if not rows:
            return None
        # Rounds of one candidate have the same number of calls (see trials.engine);
        # keep that many in case a resumed run stored a short one.
        calls = min(len(lat) for _, lat, _, _ in rows)
        if calls == 0:
            return None
        return Measured(
            candidate["id"],
            np.asarray([lat[:calls] for _, lat, _, _ in rows], dtype=np.int64),
            np.asarray([block for _, _, block, _ in rows], dtype=np.int64),
            int(candidate["batch_size"]),
            np.asarray([proc for _, _, _, proc in rows], dtype=np.int64),
        )


def load(run_id: str, store: str | Path, generative: bool = False) -> StoredRun:
    """Read a run and its raw rounds; a missing store or run id is a UserError (exit 2),
    and so is a text-generation run unless the caller takes one (`generative`)."""
    path = Path(store)
    if not path.exists():
        raise UserError(f"no store at {store} (run `bakeoff run` first, or pass --store)")
    with Store(path) as s:
        record = s.run(run_id)
        if not generative:
            refuse_generative(record, "bakeoff compare")
        run = StoredRun(record, store=Path(store))
        ids = [c["id"] for c in run.candidates]
        for cid in ids:
            rows = s.rounds(run.run_id, cid)
            if rows:
                run.rounds[cid] = rows
            warm = s.samples(run.run_id, cid, "warmup")
            if warm:
                run.warmup_calls[cid] = sum(len(w) for w in warm)
    run.input_shapes = _input_shapes(RunFolder.of(path, run.run_id).data)
    return run


def _input_shapes(data_path: Path) -> dict[str, list[int]]:
    """Per-sample input shapes from the run's data split (without each input's batch
    axis; a constant's own shape), when its folder is still there."""
    if not data_path.exists():
        return {}
    try:
        # allow_pickle=False: the split holds numeric arrays only; never unpickle.
        with np.load(data_path, allow_pickle=False) as data:
            names = split_names(data.files, "pool")
        arrays, layout = read_split(data_path, "pool", names)
    except (OSError, ValueError, KeyError):
        return {}
    return {n: list(layout.sample_shape(n, a.shape)) for n, a in arrays.items()}


def leaders(verdicts: list[dict[str, Any]]) -> dict[str, bool]:
    """Each verdict's leader -> whether it is a winner: separated from every other
    candidate and from the baseline (a run stored before verdicts had a standing
    counts its named winner as one)."""
    out: dict[str, bool] = {}
    for v in verdicts:
        if v.get("winner"):
            standing = v.get("standing")
            out[v["winner"]] = standing is None or (
                standing in ("clear", "baseline-leads", "no-baseline") and not v.get("ties")
            )
    return out
