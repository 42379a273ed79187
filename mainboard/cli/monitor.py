"""`mainboard monitor [--json]`: one durable pass over every job still owed an outcome."""

from __future__ import annotations

from typing import Any

import click

from mainboard.cli import common


def _line(entry: dict[str, Any]) -> str:
    code = "" if entry["exit_code"] is None else f" exit {entry['exit_code']}"
    why = f" ({entry['reason']})" if entry["reason"] else ""
    pulled = f"; pulled {', '.join(entry['pulled'])}" if entry["pulled"] else ""
    return f"  {entry['id']} {entry['name']} on {entry['host']}: {entry['state']}{code}{why}{pulled}"


@click.command("monitor")
@common.json_option()
@click.option("--lock-wait", type=click.FloatRange(min=0), default=30.0, show_default=True,
              metavar="S", help="How long to wait for a pass already running, then report busy.")
@click.pass_context
def monitor(ctx: click.Context, as_json: bool, lock_wait: float) -> None:
    """Probe every unfinished job once, pull results, report what changed and the spend
    so far (--json: "spend": {"usd", "seconds", "unknown": job ids without a known rate,
    "jobs": [{"id", "name", "host", "state", "usd_hr", "seconds", "usd", "rate", "at"}]}).

    Safe from cron every minute and concurrently; a job's outcome is announced once.
    """
    from mainboard.fleet.workers import scheduler_share
    from mainboard.jobs.monitor import monitor_pass

    with common.board(ctx) as board:
        report = monitor_pass(board, lock_wait=lock_wait, share=scheduler_share(board.config))
    if as_json:
        common.echo_json(report)
        return
    for error in report["errors"]:
        common.warn(error)
    if report["busy"]:
        common.echo("busy: another monitor pass is running; nothing done")
        return
    for key in ("finished", "failed"):
        if report[key]:
            common.echo(f"{key}:")
            for entry in report[key]:
                common.echo(_line(entry))
    for host in report["unreachable_hosts"]:
        common.echo(f"unreachable: {host}: {report['host_errors'][host]}")
    if report["released"]:
        common.echo(f"rentals destroyed: {', '.join(report['released'])}")
    state = "changed" if report["changed"] else "no change"
    common.echo(f"{report['running']} job(s) still running or queued; {state}")
    spent = report["spend"]
    if len(spent["jobs"]) > len(spent["unknown"]):  # no known rate: --json lists them alone
        unknown = f"; {len(spent['unknown'])} job(s) rate unknown" if spent["unknown"] else ""
        common.echo(f"spend so far: ${spent['usd']:.4f} over {len(spent['jobs'])} job(s){unknown}")
