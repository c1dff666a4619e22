"""Where bakeoff keeps files. Everything is overridable so tests stay in temp dirs."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

DEFAULT_STORE = Path(".bakeoff") / "bakeoff.db"


@dataclass(frozen=True)
class RunFolder:
    """A run's files, in `<store dir>/runs/<run_id>/` beside the store that holds it.

    The one place the layout is spelled out: what the run writes there, and what
    export, reports and a resume read back.
    """

    path: Path

    @classmethod
    def of(cls, store: str | Path, run_id: str) -> RunFolder:
        """The folder of run `run_id` of the store at `store`, absolute (build steps
        change directory)."""
        return cls(Path(store).resolve().parent / "runs" / run_id)

    @property
    def data(self) -> Path:
        """The run's data split: quality hold-out, timing pool, calibration."""
        return self.path / "data.npz"

    @property
    def reference(self) -> Path:
        """The FP32 reference's outputs on the quality hold-out."""
        return self.path / "reference.npy"

    @property
    def artifacts(self) -> Path:
        """Built variants (and the variant cache's key and records)."""
        return self.path / "artifacts"

    @property
    def logs(self) -> Path:
        """One log per worker process."""
        return self.path / "logs"

    @property
    def outputs(self) -> Path:
        """Each candidate's outputs on the quality hold-out."""
        return self.path / "outputs"

    @property
    def loadgen(self) -> Path:
        """MLPerf LoadGen's own logs, for the server and offline scenarios."""
        return self.path / "loadgen"

    @property
    def lock(self) -> Path:
        """Held by the one process running the run (see inference.resume.hold_run_lock)."""
        return self.path / "run.lock"

    def log(self, name: str) -> Path:
        """The log file of a worker: `logs/<name>.log`."""
        return self.logs / f"{name}.log"


def resume_command(run_id: str, store: str | Path) -> str:
    """The command line that finishes this run (with --store where it is not the default)."""
    where = "" if Path(store) == DEFAULT_STORE else f" --store {shlex.quote(str(store))}"
    return f"bakeoff run --resume {run_id}{where}"


def cache_dir() -> Path:
    """Cache for things built once per machine (the trained digits CNN)."""
    if env := os.environ.get("BAKEOFF_CACHE_DIR"):
        path = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "bakeoff"
    path.mkdir(parents=True, exist_ok=True)
    return path
