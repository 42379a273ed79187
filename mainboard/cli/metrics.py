"""CLI verb `metrics`: the workspace's Prometheus series, once, on stdout.

Prometheus scrapes them from Flower's ``/metrics`` (started by ``fleet up`` or
``mainboard flower``; basic auth: user ``mainboard``, password in
``.mainboard/flower.secret``). This verb prints the same ``mainboard_*`` series without
Flower: for node_exporter's textfile collector, a cron job, or a look by hand.
``--json`` prints the same numbers as one object. A source that cannot be read (broker
down, a host that does not answer) is named on stderr and its section is left out;
the exit code is then 1.
"""

from __future__ import annotations

import sys

import click

from mainboard.cli import common


@click.command("metrics")
@common.json_option("Print the numbers as one JSON object instead of the text format.")
@click.option("--no-fleet", is_flag=True,
              help="Leave out worker states (they ask every host's scheduler).")
@click.pass_context
def metrics(ctx: click.Context, as_json: bool, no_fleet: bool) -> None:
    """Print queue depths, fleet workers per pool and state, allocations, spend per
    provider pool and live runs' batches/s in Prometheus' text format."""
    from prometheus_client import CollectorRegistry, generate_latest

    from mainboard.metrics.exposition import StaticCollector
    from mainboard.metrics.gather import gather

    config = common.load(ctx)
    snap = gather(config, fleet=not no_fleet)
    if as_json:
        common.echo_json(snap.to_dict())
    else:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(StaticCollector(snap))
        common.echo(generate_latest(registry).decode(), nl=False)
    for section, why in snap.errors.items():
        common.echo(f"mainboard: {section}: {why}", err=True)
    if snap.errors:
        sys.exit(1)
