"""`mainboard compute [--json|--agent]`: every host and provider, whether usable now, and what it has."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mainboard.cli import common

if TYPE_CHECKING:
    from mainboard.hosts.compute import ComputeRow

_STYLE = {"here": "green", "ready": "green", "keyed": "green", "not-set-up": "yellow"}


def _table(rows: list[ComputeRow], first: str, access: str) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column(first, no_wrap=True)
    table.add_column("KIND", no_wrap=True)
    table.add_column(access, overflow="fold", max_width=48)
    table.add_column("HARDWARE" if first == "HOST" else "WHAT", overflow="fold")
    for row in rows:
        table.add_row(Text(row.name), Text(row.kind),
                      Text(row.access_text, style=_STYLE.get(row.access, "red")), Text(row.summary))
    return table


@click.command("compute")
@common.json_option("Print the rows as a JSON list.")
@click.option("--agent", is_flag=True,
              help="One key=value line per row, fixed key order (for scripts and LLM agents).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds each host check may take (they run concurrently).")
@click.pass_context
def compute(ctx: click.Context, as_json: bool, agent: bool, timeout: float) -> None:
    """List local, every declared host and every provider with its access state.

    Access is here | ready | unreachable (reason) | auth-failed | not-set-up (what is
    missing) for hosts and keyed | missing for providers (the key itself is never
    read into the output). Hardware comes from cached facts: `mainboard facts --on NAME`.
    """
    # Imported late: `mainboard --help` stays fast and never needs paramiko.
    from mainboard.hosts.compute import agent_lines, list_compute

    if as_json and agent:
        raise click.UsageError("--json and --agent are alternatives; give one")
    rows = list_compute(common.load(ctx),
                        timeout=timeout)
    if as_json:
        click.echo(json.dumps([row.model_dump(mode="json") for row in rows], indent=2))
    elif agent:
        for line in agent_lines(rows):
            click.echo(line)
    else:
        console = Console()
        console.print(_table([r for r in rows if r.type == "host"], "HOST", "ACCESS"))
        providers = [r for r in rows if r.type == "provider"]
        if providers:
            console.print()
            console.print(_table(providers, "PROVIDER", "CREDENTIALS"))
