"""What `bakeoff` prints at the widths of ordinary terminals: no line wider than the
terminal and no id cut (Rich would squeeze `torch-fp32-b1` to `torch-fp…`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

WIDTHS = (80, 100, 120)


def printed_at(width: int, command: Callable[[], str]) -> str:
    """What `command` printed (it returns its stdout) with the terminal `width` wide."""
    from bakeoff.cli.output import out

    saved = out.width
    out.width = width
    try:
        return command()
    finally:
        out.width = saved


def assert_fits(text: str, width: int, ids: Iterable[str]) -> None:
    for line in text.splitlines():
        assert len(line) <= width, f"{len(line)} > {width} columns:\n{line}\n\n{text}"
    for one in ids:
        # whole: not followed by more of an id (a longer id), nor cut to `torch-fp…`
        assert re.search(rf"(?<![\w.-]){re.escape(one)}(?![\w-])", text), (one, width, text)
