"""CLI verb `broker`: start, stop and inspect the embedded Redis of this workspace.

The state dir comes from mainboard.toml (``<workspace>/.mainboard``); with no
mainboard.toml the implicit default config puts it in the current directory.
``broker status`` exits 3 when the broker is not running (or not answering), as
``systemctl status`` does for an inactive unit; its output is printed either way.
``broker up --replicas N`` starts a local Sentinel-managed set instead
(:mod:`mainboard.services.sentinels`) and prints the ``[broker]`` lines that point the
workspace at it (stdout: they can be appended to mainboard.toml); ``broker down`` stops
whichever runs, ``broker status`` reports both.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from mainboard.cli import common

if TYPE_CHECKING:  # imported lazily: redis-py costs every other verb ~0.2 s at startup
    from mainboard.services.broker import BrokerStatus, EmbeddedBroker
    from mainboard.services.sentinels import LocalSentinelSet, SetStatus


def _broker(ctx: click.Context) -> tuple[EmbeddedBroker, str | None]:
    """The workspace's embedded broker, and the configured external URL (redacted) if any."""
    from mainboard.services.broker import EmbeddedBroker, redact_url

    config = common.load(ctx)
    external = config.broker.url
    return (EmbeddedBroker(config.state_dir, tls=config.broker.tls),
            redact_url(external) if external else None)


def _duration(seconds: int) -> str:
    """``42s``, ``3m07s``, ``5h02m``, ``3d4h``: short enough for one line."""
    minutes, hours = seconds // 60, seconds // 3600
    if seconds < 60:
        return f"{seconds}s"
    if minutes < 60:
        return f"{minutes}m{seconds % 60:02d}s"
    if hours < 48:
        return f"{hours}h{minutes % 60:02d}m"
    return f"{hours // 24}d{hours % 24}h"


def _describe(status: BrokerStatus) -> str:
    """One short friendly line for people; --json gives everything."""
    if not status.running:
        head = {"stopped": f"broker stopped (pid {status.pid})",
                "not running": "broker was not running"}.get(status.action or "",
                                                              "broker stopped")
        if status.action is None:
            head += " (start it with `mainboard broker up`)"
        return head + (f"; {status.note}" if status.note else "")
    head = {"started": "broker started", "already running": "broker already running"}.get(
        status.action or "", "broker running")
    details = [f"pid {status.pid}"]
    if status.uptime_s is not None:
        details.append(f"up {_duration(status.uptime_s)}")
    if status.memory_used_human:
        details.append(f"memory {status.memory_used_human}")
    if status.keys is not None:
        details.append(f"{status.keys} keys")
    if status.aof_enabled is not None:
        details.append("AOF on" if status.aof_enabled else "AOF OFF")
    if status.note:
        details.append(status.note)
    return f"{head}: {status.url}  ({', '.join(details)}; data in {status.state_dir}/redis)"


def _emit(status: BrokerStatus, as_json: bool, external: str | None) -> None:
    if as_json:
        common.echo(json.dumps({**status.to_dict(), "configured_url": external}))
        return
    common.echo(_describe(status))
    if external:
        common.echo(f"note: mainboard.toml sets [broker] url = {external}; "
                    "jobs use that, not this embedded broker")


# What a status verb (`broker`, `flower`, `fleet status`) exits with when what it reports is
# not running: the code `systemctl status` gives an inactive unit. Its output is printed anyway.
STATUS_DOWN = 3


def _local_set(ctx: click.Context) -> LocalSentinelSet:
    from mainboard.services.sentinels import LocalSentinelSet

    return LocalSentinelSet(common.load(ctx).state_dir)


def _describe_set(shown: SetStatus) -> str:
    """One line for people about the local sentinel set."""
    if not shown.running:
        return f"sentinel set {shown.action or 'stopped'}" + \
            (f"; {shown.note}" if shown.note else "")
    return (f"sentinel set {shown.action or 'running'}: master {shown.master_name} at "
            f"{shown.master}, replicas {', '.join(shown.replicas) or 'none'}, sentinels "
            f"{', '.join(shown.sentinels)} (data in {shown.state_dir}/sentinels)")


@click.command("up")
@click.option("--replicas", type=int, default=None, metavar="N",
              help="Start a local master, N replicas and three sentinels instead, and print "
                   "the [broker] lines that use them.")
@common.json_option("Print one JSON object.")
@click.pass_context
def up(ctx: click.Context, replicas: int | None, as_json: bool) -> None:
    """Start the embedded broker, or reuse the one already running."""
    if replicas is None:
        broker, external = _broker(ctx)
        _emit(broker.up(), as_json, external)
        return
    from mainboard.errors import UserError
    from mainboard.services.broker import find_redis_server

    if replicas < 1:  # before anything is read or started
        raise UserError(f"--replicas {replicas}: valid: an integer >= 1 (the replicas kept "
                        "beside the master)")
    shown = _local_set(ctx).up(replicas, find_redis_server())
    if as_json:
        common.echo(json.dumps({**shown.to_dict(), "toml": shown.toml()}))
        return
    common.echo(_describe_set(shown), err=True)
    common.echo("# add to mainboard.toml (and remove any [broker] url):", err=True)
    common.echo(shown.toml(), nl=False)


@click.command("down")
@common.json_option("Print one JSON object.")
@click.pass_context
def down(ctx: click.Context, as_json: bool) -> None:
    """Stop the embedded broker (data is kept in .mainboard/redis) and the local sentinel
    set if one runs (data kept in .mainboard/sentinels)."""
    broker, external = _broker(ctx)
    local = _local_set(ctx)
    shown_set = local.down() if local.recorded() else None
    stopped = broker.down()
    if as_json:
        extra = {"sentinel_set": shown_set.to_dict()} if shown_set else {}
        common.echo(json.dumps({**stopped.to_dict(), "configured_url": external, **extra}))
        return
    if shown_set is not None:
        common.echo(_describe_set(shown_set))
    _emit(stopped, False, external)


@click.command("status")
@common.json_option("Print one JSON object.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show whether the embedded broker (or the local sentinel set) runs, with memory, uptime
    and keys; exit 3 when neither is running or answering."""
    broker, external = _broker(ctx)
    shown = broker.status()
    local = _local_set(ctx)
    shown_set = local.status() if local.recorded() else None
    if as_json:
        extra = {}
        if shown_set is not None:
            extra = {"master": {"name": shown_set.master_name, "address": shown_set.master},
                     "replicas": shown_set.replicas, "sentinels": shown_set.sentinels,
                     "sentinel_set": shown_set.to_dict()}
        common.echo(json.dumps({**shown.to_dict(), "configured_url": external, **extra}))
    else:
        if shown_set is not None:
            common.echo(_describe_set(shown_set))
        if shown_set is None or shown.running:
            _emit(shown, False, external)
    if not ((shown.running and shown.redis_version) or (shown_set and shown_set.running)):
        sys.exit(STATUS_DOWN)


@click.group("broker")
def broker() -> None:
    """The embedded Redis broker (loopback, password in .mainboard/broker.secret)."""


for _command in (up, down, status):
    broker.add_command(_command)
