"""CLI verb `run` (being written)."""

import click


@click.command("run")
def run() -> None:
    """(being written)"""
    raise click.ClickException("not yet built")
