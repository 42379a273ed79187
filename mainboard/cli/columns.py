"""The ``--agent`` output format: plain aligned columns under a header line (and the rich
tables people get instead: ``table``, ``show``).

Made for scripts and LLM agents: one header line of lower-case keys, then one line per
row, every column starting at the same place. Columns are separated by two or more
spaces and no value holds two spaces in a row (whitespace runs are made single), so
``re.split(r"\\s{2,}", line)`` reads a line back (``read_columns``). An empty value is
``-``; numbers are plain decimals (at most 4 places).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mainboard.redact import redact_text

if TYPE_CHECKING:
    from rich.table import Table

GAP = "  "
EMPTY = "-"
_SPLIT = re.compile(r"\s{2,}")


def cell(value: object) -> str:
    """One column value as printed."""
    if value is None or value == "":
        return EMPTY
    if isinstance(value, float):
        return format(round(value, 4), "g")
    return " ".join(str(value).split()) or EMPTY


def columns(keys: Sequence[str], rows: Sequence[Mapping[str, object]]) -> list[str]:
    """The header line and one aligned line per row (values looked up by ``keys``)."""
    table = [list(keys)] + [[cell(row.get(key)) for key in keys] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(keys))]
    return [GAP.join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
            for line in table]


def read_columns(lines: Sequence[str]) -> list[dict[str, str | None]]:
    """Rows back from ``columns`` output (``-`` read as None)."""
    header = _SPLIT.split(lines[0].strip())
    return [{key: (None if text == EMPTY else text)
             for key, text in zip(header, _SPLIT.split(line.strip()), strict=True)}
            for line in lines[1:]]


def echo(keys: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Print ``columns`` on stdout, each row given as its values in ``keys`` order."""
    import click

    for line in columns(keys, [dict(zip(keys, row, strict=True)) for row in rows]):
        click.echo(redact_text(line))


def table(*names: str, fold: int = 1) -> Table:
    """A rich table for people; only the last ``fold`` columns wrap, the others keep whole
    words."""
    from rich.table import Table

    class Redacted(Table):
        """Cells through the one redaction before rich wraps them (a wrapped URL would
        no longer look like one)."""

        def add_row(self, *cells: Any, **options: Any) -> None:
            super().add_row(*(redact_text(c) if isinstance(c, str) else c for c in cells),
                            **options)

    out = Redacted(box=None, pad_edge=False, header_style="bold")
    for index, name in enumerate(names):
        wraps = index >= len(names) - fold
        out.add_column(name, overflow="fold" if wraps else "ellipsis", no_wrap=not wraps)
    return out


def show(*renderables: Any) -> None:
    """Print rich renderables on stdout, never wrapped to the terminal's width."""
    from rich.console import Console

    Console(soft_wrap=False).print(*renderables)
