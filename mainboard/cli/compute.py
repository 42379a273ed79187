"""`mainboard compute [--json|--agent]`: every host and provider, whether usable now, and what it has."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from mainboard.cli import common

if TYPE_CHECKING:
    from rich.table import Table

    from mainboard.hosts.compute import ComputeRow

_STYLE = {"here": "green", "ready": "green", "keyed": "green", "not-set-up": "yellow"}


def _table(rows: list[ComputeRow], first: str, access: str) -> Table:
    from rich.table import Table  # start-up time: rich only when a table is drawn
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column(first, no_wrap=True)
    table.add_column("KIND", no_wrap=True)
    table.add_column(access, overflow="fold", max_width=48)
    table.add_column("HARDWARE" if first == "HOST" else "WHAT", overflow="fold")
    table.add_column("USD/H", justify="right", no_wrap=True)
    if first != "HOST":
        table.add_column("CREDIT USD", justify="right", no_wrap=True)
    for row in rows:
        cells = [Text(row.name), Text(row.kind),
                 Text(row.access_text, style=_STYLE.get(row.access, "red")), Text(row.summary),
                 Text(_money(row.usd_hr))]
        table.add_row(*cells, *([Text(_money(row.credit_usd))] if first != "HOST" else []))
    return table


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


@click.command("compute")
@common.json_option("Print the rows as a JSON list.")
@click.option("--agent", is_flag=True,
              help="Plain aligned columns name, kind, access, detail, usd_hr, credit_usd "
                   "under a header line; split on two or more spaces; - is empty "
                   "(for scripts and LLM agents).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds each host check may take (they run concurrently).")
@click.pass_context
def compute(ctx: click.Context, as_json: bool, agent: bool, timeout: float) -> None:
    """List local, every declared host and every provider with its access state.

    Access is here | ready | unreachable (reason) | auth-failed | not-set-up (what is
    missing, e.g. a [deps] pin) for hosts and keyed | missing for providers (the key
    itself is never read into the output). Hardware comes from cached facts: `mainboard
    facts --on NAME`. A keyed provider is asked for its cheapest fitting offer (usd_hr)
    and the account's remaining credit (credit_usd). Everything is asked at once; the
    listing ends within about --timeout seconds, a silent host being one row.
    """
    # Imported late: `mainboard --help` stays fast and never needs paramiko.
    from mainboard.cli.columns import columns
    from mainboard.hosts.compute import AGENT_KEYS, list_compute

    if as_json and agent:
        raise click.UsageError("--json and --agent are alternatives; give one")
    rows = list_compute(common.load(ctx),
                        timeout=timeout)
    if as_json:
        common.echo(json.dumps([row.model_dump(mode="json") for row in rows], indent=2))
    elif agent:
        for line in columns(AGENT_KEYS, [row.model_dump() for row in rows]):
            common.echo(line)
    else:
        from rich.console import Console

        console = Console()
        console.print(_table([r for r in rows if r.type == "host"], "HOST", "ACCESS"))
        providers = [r for r in rows if r.type == "provider"]
        if providers:
            console.print()
            console.print(_table(providers, "PROVIDER", "CREDENTIALS"))
