"""Where the commands print, and how they write sizes and times."""

from __future__ import annotations

import datetime

from rich.console import Console

out = Console()
err = Console(stderr=True)
if not out.is_terminal:  # pipes and CI logs: wide enough for the results table
    out = Console(width=160)
if not err.is_terminal:
    err = Console(stderr=True, width=160)


def mb(n: float) -> str:
    """A size in bytes, in the unit that shows it best."""
    for unit in ("B", "KB", "MB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.2f} GB"


def when(ts: float) -> str:
    """A Unix time as local date and minute."""
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
