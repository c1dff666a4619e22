"""Where bakeoff keeps files. Everything is overridable so tests stay in temp dirs."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_STORE = Path(".bakeoff") / "bakeoff.db"


def cache_dir() -> Path:
    """Cache for things built once per machine (the trained digits CNN)."""
    if env := os.environ.get("BAKEOFF_CACHE_DIR"):
        path = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "bakeoff"
    path.mkdir(parents=True, exist_ok=True)
    return path
