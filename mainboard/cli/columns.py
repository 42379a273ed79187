"""Tables: rich tables for people (``table``, ``show``), plain columns for ``--agent``.

``--agent`` output is for scripts and LLM agents. The first line names the columns; every later line is one row, each value one word:
``-`` where a value is unknown (never a made-up number), shell quoting around a value
with spaces or quotes (double quotes where that is enough), so ``shlex.split(line)``
gives the fields back. Numbers are
plain (bytes as integers, seconds and dollars with fixed decimals), no units.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.table import Table

BLANK = "-"


def table(*columns: str, fold: int = 1) -> Table:
    """A plain table; only the last ``fold`` columns wrap, the others keep whole words."""
    from rich.table import Table

    out = Table(box=None, pad_edge=False, header_style="bold")
    for index, column in enumerate(columns):
        wraps = index >= len(columns) - fold
        out.add_column(column, overflow="fold" if wraps else "ellipsis", no_wrap=not wraps)
    return out


def show(*renderables: Any) -> None:
    """Print rich renderables on stdout, never wrapped to the terminal's width."""
    from rich.console import Console

    Console(soft_wrap=False).print(*renderables)


def word(value: object, digits: int = 2) -> str:
    """One value as one column word."""
    if value is None or value == "":
        return BLANK
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    text = str(value)
    if not any(c.isspace() or c in "'\"\\" for c in text):
        return text
    if not any(c in "\"\\$`" for c in text):  # readable: "host 'hpc': ..."
        return f'"{text}"'
    return shlex.quote(text)


def lines(keys: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The header and the rows, each column padded to its widest word."""
    table = [list(keys), *([word(v) for v in row] for row in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(keys))]
    return [" ".join(w.ljust(widths[i]) for i, w in enumerate(r)).rstrip() for r in table]


def echo(keys: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Print the columns on stdout."""
    for line in lines(keys, rows):
        click.echo(line)
