"""CLI verb `compute` (being written)."""

import click


@click.command("compute")
def compute() -> None:
    """(being written)"""
    raise click.ClickException("not yet built")
