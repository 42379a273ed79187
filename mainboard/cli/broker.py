"""CLI verb `broker` (being written)."""

import click


@click.command("broker")
def broker() -> None:
    """(being written)"""
    raise click.ClickException("not yet built")
