"""CLI verb `dashboard`: the workspace's runs, fleet and jobs in a browser.

``mainboard dashboard [--host H] [--port P] [--open]`` serves on 127.0.0.1 and a free
port by default, prints one URL carrying a fresh token (open it as is; without the
token every page answers 401), and serves until Ctrl-C. ``--base-path /board/`` puts
every page, asset and API under that path, for a reverse proxy that forwards it as is. It reads receipts and Redis
only, so it can start after a run and keeps working with the broker down.
"""

from __future__ import annotations

import json

import click

from mainboard.cli import common


@click.command("dashboard")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (anything but loopback exposes it to the network).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port to listen on; 0 picks a free one.")
@click.option("--base-path", default="/", show_default=True,
              help="URL path prefix of every page, asset and API (behind a reverse proxy).")
@click.option("--token-file", type=click.Path(dir_okay=False, exists=True),
              help="Read the token from this (0600) file instead of making a fresh one, so "
                   "a restarted dashboard keeps its URL (`mainboard up` uses it).")
@click.option("--open", "open_browser", is_flag=True, help="Open the URL in a web browser.")
@common.json_option("Print the URL as one JSON object (then serve).")
@click.pass_context
def dashboard(ctx: click.Context, host: str, port: int, base_path: str,
              token_file: str | None, open_browser: bool, as_json: bool) -> None:
    """Serve the dashboard: runs (live first), each run's convergence, fleet, jobs."""
    import asyncio

    from mainboard.dashboard.auth import new_token, read_token
    from mainboard.dashboard.server import clean_base_path, serve

    base = clean_base_path(base_path)
    token = read_token(token_file) if token_file else new_token()
    config = common.load(ctx)

    def ready(url: str) -> None:
        # The one line printed unredacted on purpose: its token is what opens the pages.
        if as_json:
            click.echo(json.dumps({"url": url, "state_dir": str(config.state_dir)}))
        else:
            click.echo(url)
        common.echo(f"dashboard of {config.state_dir} (Ctrl-C stops it)", err=True)
        if host not in ("127.0.0.1", "localhost", "::1"):
            common.warn(f"listening on {host}, not loopback: anyone who can reach it and "
                        "has the URL sees the runs (plain HTTP)")
        import sys

        sys.stdout.flush()
        if open_browser:
            import webbrowser

            if not webbrowser.open(url):
                click.echo("mainboard: no web browser found; open the URL above", err=True)

    with common.streaming():
        asyncio.run(serve(config, host, port, token, ready, base))
