"""CLI verb `flower`: Celery's web monitor for this workspace, on loopback, behind basic auth.

``mainboard flower [--port P]`` starts it (or reports the running one) and prints the
URL and where the password is kept; ``mainboard flower status`` and ``mainboard flower
stop`` inspect and stop it. The password itself is never printed.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from mainboard.cli import common
from mainboard.cli.broker import STATUS_DOWN

if TYPE_CHECKING:  # imported lazily: celery and redis-py are slow to import
    from mainboard.config import Config
    from mainboard.services.flower import Flower, FlowerStatus


def _flower(ctx: click.Context) -> tuple[Flower, Config]:
    """The workspace's Flower and its config."""
    from mainboard.services.flower import Flower

    config = common.load(ctx)
    return Flower(config.state_dir), config


def _describe(status: FlowerStatus) -> str:
    """One line for people: URL, user, where the password is; --json gives everything."""
    if not status.running:
        head = {"stopped": f"flower stopped (pid {status.pid})",
                "not running": "flower was not running"}.get(status.action or "", "flower stopped")
        if status.action is None:
            head += " (start it with `mainboard flower`)"
        return head + (f"; {status.note}" if status.note else "")
    head = {"started": "flower started", "already running": "flower already running"}.get(
        status.action or "", "flower running")
    details = [f"user {status.user}", f"password in {status.secret_file}", f"pid {status.pid}"]
    if status.answering is False:
        details.append("NOT answering yet")
    if status.note:
        details.append(status.note)
    return f"{head}: {status.url}  ({'; '.join(details)}; log {status.log_file})"


def _emit(status: FlowerStatus, as_json: bool) -> None:
    common.echo(json.dumps(status.to_dict()) if as_json else _describe(status))


_JSON = common.json_option("Print one JSON object.")


@click.group("flower", invoke_without_command=True)
@click.option("--port", type=click.IntRange(1, 65535),
              help="Port on 127.0.0.1 (default: the last one used, else a free one).")
@_JSON
@click.pass_context
def flower(ctx: click.Context, port: int | None, as_json: bool) -> None:
    """Start Flower on 127.0.0.1 with basic auth (user mainboard, password in
    .mainboard/flower.secret); `flower status` and `flower stop` manage it.

    The broker must answer first (else one line naming its host:port, exit 1).
    `flower status` exits 3 when Flower is not running.
    """
    if ctx.invoked_subcommand is not None:
        return
    from mainboard.services.broker import check_broker
    from mainboard.tasks.app import resolve_url

    server, config = _flower(ctx)
    # $MAINBOARD_BROKER_URL, else [broker] url, else the embedded broker (started if needed)
    broker_url = resolve_url(config)
    check_broker(broker_url, config)
    _emit(server.up(broker_url, port=port, config_path=config.path), as_json)


@flower.command("status")
@_JSON
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show whether Flower runs, its URL and where its password is; exit 3 when it does not."""
    shown = _flower(ctx)[0].status()
    _emit(shown, as_json)
    if not shown.running:
        sys.exit(STATUS_DOWN)


@flower.command("stop")
@_JSON
@click.pass_context
def stop(ctx: click.Context, as_json: bool) -> None:
    """Stop this workspace's Flower."""
    _emit(_flower(ctx)[0].down(), as_json)
