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
    """A size in bytes, in the binary unit that shows it best (bakeoff's one unit
    system: every size and memory figure is in KiB, MiB or GiB)."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def when(ts: float) -> str:
    """A Unix time as local date and minute."""
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
