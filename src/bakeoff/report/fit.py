"""Tables that fit the terminal without cutting an id.

Rich squeezes a table wider than the terminal by cutting its cells (`torch-fp…` for
both the b1 and the b32 row), and the id is what a user must read or copy. So the
id columns (the first ones) never wrap, and a table too wide for the terminal is
split by one rule: its columns keep their order, and those that do not fit at their
natural width move to a further table that repeats the ids, so nothing is cut and
nothing is lost. Where the ids and one more column are wider than the terminal, that
column's cells wrap.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Column, Table

__all__ = ["fitted"]


def _part(table: Table, columns: list[Column], title: bool) -> Table:
    part = Table(
        title=table.title if title else None,
        box=table.box,
        show_edge=table.show_edge,
        pad_edge=table.pad_edge,
        expand=False,
    )
    for col in columns:
        # fold: a word wider than its column (a long path) breaks, never ends in "…"
        part.add_column(
            col.header,
            justify=col.justify,
            no_wrap=col.no_wrap,
            overflow="ellipsis" if col.no_wrap else "fold",
            style=col.style or "",
        )
    for row in zip(*(list(col.cells) for col in columns), strict=True):
        part.add_row(*row)
    return part


def _natural(console: Console, table: Table) -> int:
    """The width `table` takes with no cell wrapped."""
    return Measurement.get(console, console.options.update_width(10_000), table).maximum


def fitted(table: Table, width: int, ids: int = 1) -> RenderableType:
    """`table` as one or more tables, each at most `width` columns wide, with its
    first `ids` columns whole in every one of them."""
    for col in table.columns[:ids]:
        col.no_wrap = True
    console = Console(width=10_000)
    if _natural(console, table) <= width:
        return table
    keys = table.columns[:ids]
    parts: list[list[Column]] = []
    current: list[Column] = []
    for col in table.columns[ids:]:
        if current and _natural(console, _part(table, [*keys, *current, col], False)) > width:
            parts.append(current)
            current = []
        current.append(col)
    parts.append(current)
    return Group(*(_part(table, [*keys, *part], i == 0) for i, part in enumerate(parts)))
