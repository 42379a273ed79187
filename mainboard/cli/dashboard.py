"""CLI verb `dashboard`: the workspace's runs, fleet and jobs in a browser.

``mainboard dashboard [--host H] [--port P] [--open]`` serves on 127.0.0.1 and a free
port by default, prints one URL carrying a fresh token (open it as is; without the
token every page answers 401), and serves until Ctrl-C. It reads receipts and Redis
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
@click.option("--open", "open_browser", is_flag=True, help="Open the URL in a web browser.")
@common.json_option("Print the URL as one JSON object (then serve).")
@click.pass_context
def dashboard(ctx: click.Context, host: str, port: int, open_browser: bool,
              as_json: bool) -> None:
    """Serve the dashboard: runs (live first), each run's convergence, fleet, jobs."""
    import asyncio

    from mainboard.dashboard.auth import new_token
    from mainboard.dashboard.server import serve

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
        asyncio.run(serve(config, host, port, new_token(), ready))
