"""CLI verb `config`: `mainboard config check [--json]` validates mainboard.toml and shows the hosts.

Useful after editing the file: every problem is reported as one line naming the file, the
key path, the line and what is valid (exit code 2). Nothing secret is printed: the config
holds only environment-variable NAMES for API keys, and a broker URL's password and host env
values with secret-looking names (interpolated from the environment) are redacted.
"""

from __future__ import annotations

import json
from typing import Any

import click

from mainboard.cli import common
from mainboard.redact import looks_secret, redact_url


@click.group("config")
def config() -> None:
    """Inspect mainboard.toml."""


@config.command("check")
@common.json_option("Print the validated config as JSON.")
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Validate mainboard.toml and list the hosts it declares."""
    from mainboard.bridges import bridge_class  # here, not at import: CLI start-up time
    from mainboard.config import load_config

    loaded = load_config(common.config_path(ctx), required=True)
    dump = _redacted(loaded.model_dump(mode="json"))
    if as_json:
        common.echo(json.dumps(dump, indent=2))
        return
    common.echo(f"{loaded.path}: ok")
    common.echo(f"broker: {dump['broker']['url'] or 'embedded (mainboard broker up)'}")
    names = loaded.host_names()
    width = max(len(n) for n in names)
    for name in names:
        host = loaded.host(name)
        common.echo(f"  {name:<{width}}  {host.kind:<8}  "
                    f"{_where(host, bridge_class(host.kind).scheduler_command())}")


def _where(host: Any, scheduler: str | None) -> str:
    """One short phrase saying how the host is reached (and the scheduler's command)."""
    params = host.ssh_params()
    if params is not None:
        where = f"ssh {params.user}@{params.host}:{params.port}"
    elif host.kind == "provider":
        where = f"rented from {host.provider}" + (f" ({host.gpu})" if host.gpu else "")
    else:
        where = "this machine"
    if scheduler:
        where += f", {scheduler}"
    return where + (f", root {host.root}" if host.root else "")


def _redacted(dump: dict[str, Any]) -> dict[str, Any]:
    """Hide the broker passwords and host env values whose names look secret (interpolated)."""
    for key in ("url", "worker_url"):
        if dump["broker"].get(key):
            dump["broker"][key] = redact_url(dump["broker"][key])
    for host in dump["hosts"].values():
        for name in host["env"]:
            if looks_secret(name):
                host["env"][name] = "***"
    return dump
