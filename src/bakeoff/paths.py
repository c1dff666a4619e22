"""Where bakeoff keeps files. Everything is overridable so tests stay in temp dirs."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

DEFAULT_STORE = Path(".bakeoff") / "bakeoff.db"


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
