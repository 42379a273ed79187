"""The `mainboard` command: a click group whose verbs live one per module.

User errors exit 2 with one line; tracebacks only with ``--debug``.
"""

from __future__ import annotations

import sys

import click

from mainboard.errors import MainboardError


class _Group(click.Group):
    """Turns MainboardError into one line and its exit code, unless --debug."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except MainboardError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"mainboard: error: {exc}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              envvar="MAINBOARD_CONFIG", help="Path to mainboard.toml (default: search upwards).")
@click.version_option(package_name="mainboard")
@click.pass_context
def cli(ctx: click.Context, debug: bool, config_path: str | None) -> None:
    """mainboard: batch work and Monte Carlo integration on every machine you can reach."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["config_path"] = config_path


def _register() -> None:
    from mainboard.cli.batch import batch
    from mainboard.cli.broker import broker
    from mainboard.cli.compute import compute
    from mainboard.cli.config import config
    from mainboard.cli.facts import facts
    from mainboard.cli.fleet import fleet
    from mainboard.cli.flower import flower
    from mainboard.cli.integrate import integrate
    from mainboard.cli.jobs import jobs
    from mainboard.cli.monitor import monitor
    from mainboard.cli.run import run
    from mainboard.cli.runs import runs
    from mainboard.cli.submit import submit

    for command in (run, facts, compute, broker, config, integrate, runs, flower, submit, jobs,
                    monitor, fleet, batch):
        cli.add_command(command)


_register()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="mainboard")
