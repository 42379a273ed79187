"""CLI verb `facts` (being written)."""

import click


@click.command("facts")
def facts() -> None:
    """(being written)"""
    raise click.ClickException("not yet built")
