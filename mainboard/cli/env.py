"""`mainboard env status|build|remove [--on HOST] [--json]`: a host's provisioned environments.

The environment is the one jobs and ``mainboard run`` get: ``[deps] python`` as a
uv-managed interpreter (installed from ``[python] mirror``/``downloads`` when missing) with
``[python.deps]`` on it, keyed by what was declared. Results on stdout, progress on stderr.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from mainboard.cli import common


def _on(func: Any) -> Any:
    func = click.option("--on", "host", default="local", show_default=True, metavar="HOST",
                        help="Host from mainboard.toml.")(func)
    return common.json_option("Print the result as JSON.")(func)


def _progress(name: str, text: str) -> None:
    """The driver's progress (its stderr) as it comes; its stdout is the result, kept."""
    if name == "stderr":
        click.echo(text, err=True, nl=False)


def _size(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB"


def _age(created: float | None) -> str:
    if not created:
        return "-"
    seconds = max(0.0, time.time() - created)
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


@click.group("env")
def env() -> None:
    """Show, build and remove the environments declared by [deps] python and [python.deps]."""


def _ask(ctx: click.Context, host: str, pick: Callable[[Any], Callable[..., Any]],
         **options: Any) -> Any:
    """One backend call for ``host`` (status, build or remove), on the host's transport and
    root: what every env verb repeats."""
    from mainboard.bridges.envs import backend_for

    with common.board(ctx) as board:
        handle = board.on(host)
        return pick(backend_for(board.config))(board.config, host, handle.transport,
                                               handle.root, **options)


@env.command("status")
@_on
@click.pass_context
def status(ctx: click.Context, host: str, as_json: bool) -> None:
    """Declared python, the interpreter found for it, the env key, built or not, each env."""
    found = _ask(ctx, host, lambda backend: backend.status)
    if as_json:
        common.echo_json(found.as_json(), indent=2)
        return
    common.echo(f"host: {found.host}")
    common.echo(f"declared python: {found.declared_python or '- (the host python)'}")
    common.echo(f"interpreter: {found.interpreter or 'not installed'}")
    common.echo(f"env key: {found.key} ({'built' if found.built else 'not built'}"
                f"{', python ' + found.python_version if found.python_version else ''})")
    for item in found.envs:
        mark = "*" if item["key"] == found.key else " "
        common.echo(f" {mark} {item['key']}  python {item.get('python') or '?'}  "
                    f"{_size(int(item.get('size') or 0))}  {_age(item.get('created'))}")


@env.command("build")
@_on
@click.pass_context
def build(ctx: click.Context, host: str, as_json: bool) -> None:
    """Provision now: install the declared interpreter if missing, then build the env."""
    built = _ask(ctx, host, lambda backend: backend.build, stream=_progress)
    state = "built" if built.installed else "reused"
    common.echo(f"mainboard: env {state}: {host} {built.key} python {built.python_version}",
                err=True)
    if as_json:
        common.echo_json({"host": host, "key": built.key, "env_dir": built.env_dir,
                          "python": built.python, "python_version": built.python_version,
                          "state": state, "actions": list(built.actions)}, indent=2)
    else:
        common.echo(built.env_dir)


@env.command("remove")
@_on
@click.pass_context
def remove(ctx: click.Context, host: str, as_json: bool) -> None:
    """Delete every environment under the host's root (interpreters stay)."""
    found = _ask(ctx, host, lambda backend: backend.remove)
    if as_json:
        common.echo_json({"host": host, "removed": [e["key"] for e in found.envs]}, indent=2)
    else:
        for item in found.envs:
            common.echo(f"removed {item['key']}")
