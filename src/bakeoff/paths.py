"""Where bakeoff keeps files. Everything is overridable so tests stay in temp dirs."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bakeoff.errors import UserError

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
        """Held by the one process running the run (see hold_run_lock)."""
        return self.path / "run.lock"

    def log(self, name: str) -> Path:
        """The log file of a worker: `logs/<name>.log`."""
        return self.logs / f"{name}.log"


def resume_command(run_id: str, store: str | Path, kind: str = "run") -> str:
    """The command line that finishes this run (with --store where it is not the
    default): `bakeoff run --resume`, or `bakeoff train --resume` for a training run
    (`kind` is the run's settings' "kind")."""
    where = "" if Path(store) == DEFAULT_STORE else f" --store {shlex.quote(str(store))}"
    command = "train" if kind == "train" else "run"
    return f"bakeoff {command} --resume {run_id}{where}"


def hold_run_lock(folder: RunFolder, run_id: str) -> IO[str]:
    """One process at a time per run: a resume while the run still runs elsewhere
    would measure its rounds twice. The lock goes with its process, even on SIGKILL
    (workers do not inherit the file)."""
    import fcntl

    folder.path.mkdir(parents=True, exist_ok=True)
    f = open(folder.lock, "a+")  # noqa: SIM115 (held until the run ends)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise UserError(
            f"run {run_id} is being run right now by {holder}; wait for it to finish, or "
            "stop it (Ctrl-C) and then resume"
        ) from None
    f.truncate(0)
    f.write(f"process {os.getpid()}")
    f.flush()
    return f


def cache_dir() -> Path:
    """Cache for things built once per machine (the trained digits CNN)."""
    if env := os.environ.get("BAKEOFF_CACHE_DIR"):
        path = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "bakeoff"
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_writable(path: str | Path, flag: str, folder: bool = False) -> None:
    """Refuse, before any work, an output path (`flag`'s) that could not be written once
    the work is done: a file path that is a folder, a folder path that is a file, a
    parent that is a file, or a folder this process cannot write in. Nothing is created:
    the folders missing on the way are made when the output is written."""
    path = Path(path)
    fix = f"give {flag} a path in a folder you can write to"
    if path.is_dir() and not folder:
        raise UserError(f"{flag} {path}: is a folder, not a file; {fix}")
    if path.exists() and not path.is_dir() and folder:
        raise UserError(f"{flag} {path}: is a file, not a folder; {fix}")
    # the folder written in: the path itself (a folder), else its parent; or, where
    # that is not made yet, its nearest existing ancestor, in which it will be made
    where = path if folder else path.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise UserError(f"{flag} {path}: {where} is a file, not a folder; {fix}")
    if not os.access(where, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: the folder {where} is not writable; {fix}")
