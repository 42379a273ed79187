"""CLI verb `up`: the broker, Flower, the dashboard and N local workers, supervised by one
foreground process (:mod:`mainboard.supervisor.up`) until Ctrl-C.

Prints the dashboard URL (with its token, as `mainboard dashboard` does) and Flower's
(its password stays in its 0600 file) on stdout once everything runs; restarts and
errors go to stderr, one line each.
"""

from __future__ import annotations

import json

import click

from mainboard.cli import common
from mainboard.redact import redact_text


@click.command("up")
@click.option("--workers", type=click.IntRange(0, 256), default=1, show_default=True,
              help="Local Celery batch workers to keep running.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address the dashboard listens on.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="The dashboard's port; 0 picks a free one (kept across its restarts).")
@click.option("--base-path", default="/", show_default=True,
              help="URL path prefix of the dashboard (behind a reverse proxy), e.g. /board/.")
@click.option("--flower-port", type=click.IntRange(1, 65535),
              help="Flower's port (default: the last one used, else a free one).")
@click.option("--max-restarts", type=click.IntRange(0, 1000), default=5, show_default=True,
              help="Restarts of one child within --restart-window before `up` gives up.")
@click.option("--restart-window", type=click.FloatRange(1, 86400), default=300.0,
              show_default=True, help="Seconds over which --max-restarts is counted.")
@common.json_option("Print the URLs as one JSON object (then supervise).")
@click.pass_context
def up(ctx: click.Context, workers: int, host: str, port: int, base_path: str,
       flower_port: int | None, max_restarts: int, restart_window: float,
       as_json: bool) -> None:
    """Start and supervise the broker, Flower, the dashboard and local workers; a child
    that dies is restarted (one stderr line); Ctrl-C or SIGTERM stops them all, exit 0."""
    import sys

    from mainboard.dashboard.auth import new_token
    from mainboard.dashboard.server import clean_base_path
    from mainboard.supervisor.up import Started, Supervisor, UpOptions

    options = UpOptions(workers=workers, host=host, port=port,
                        base_path=clean_base_path(base_path), flower_port=flower_port,
                        max_restarts=max_restarts, window_s=restart_window, token=new_token())
    config = common.load(ctx)

    def announce(started: Started) -> None:
        # The dashboard's URL is printed unredacted on purpose (its token opens the pages, as
        # `mainboard dashboard` prints it); everything else goes through the one redaction.
        if as_json:
            rest = {k: v for k, v in started.to_dict().items() if k != "dashboard"}
            click.echo(json.dumps({"dashboard": started.dashboard,
                                   **json.loads(redact_text(json.dumps(rest)))}))
        else:
            click.echo(f"dashboard: {started.dashboard}")
            common.echo(f"flower: {started.flower}  (user {started.flower_user}; password in "
                        f"{started.flower_secret_file})")
        sys.stdout.flush()
        common.echo(f"mainboard up: broker {started.broker}, {len(started.workers)} local "
                   f"worker(s); pids in {started.state_file} (Ctrl-C stops everything)",
                   err=True)
        for name in started.left_running:
            common.warn(f"the {name} was running before `mainboard up`: used, and left "
                        f"running when it stops (`mainboard {name} down|stop` stops it)")

    Supervisor(config, options, common.warn).run(announce)
