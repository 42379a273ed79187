"""CLI verb `broker`: start, stop and inspect the embedded Redis of this workspace.

The state dir comes from mainboard.toml (``<workspace>/.mainboard``); with no
mainboard.toml the implicit default config puts it in the current directory.
``broker status`` exits 3 when the broker is not running (or not answering), as
``systemctl status`` does for an inactive unit; its output is printed either way.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from mainboard.cli import common

if TYPE_CHECKING:  # imported lazily: redis-py costs every other verb ~0.2 s at startup
    from mainboard.services.broker import BrokerStatus, EmbeddedBroker


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


def _verb(name: str, doc: str) -> click.Command:
    """One `broker` subcommand: call EmbeddedBroker.<name>() and print the status it returns."""

    @click.command(name, help=doc)
    @common.json_option("Print one JSON object.")
    @click.pass_context
    def command(ctx: click.Context, as_json: bool) -> None:
        broker, external = _broker(ctx)
        shown = getattr(broker, name)()
        _emit(shown, as_json, external)
        if name == "status" and not (shown.running and shown.redis_version):
            sys.exit(STATUS_DOWN)

    return command


@click.group("broker")
def broker() -> None:
    """The embedded Redis broker (loopback, password in .mainboard/broker.secret)."""


for _name, _doc in (
    ("up", "Start the embedded broker, or reuse the one already running."),
    ("down", "Stop the embedded broker (data is kept in .mainboard/redis)."),
    ("status", "Show whether the embedded broker runs, with memory, uptime and keys; "
               "exit 3 when it is not running or not answering."),
):
    broker.add_command(_verb(_name, _doc))
