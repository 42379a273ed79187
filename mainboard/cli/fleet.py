"""CLI verb `fleet`: Celery workers on your hosts — `up`, `status`, `down`.

    mainboard fleet up [--on HOST ...] [--workers N] [--queues Q,...] [--walltime T]
    mainboard fleet status [--json] [--all]
    mainboard fleet down [--on HOST ...]

Heavy imports (Celery, paramiko, redis) happen inside the commands, so other verbs
start fast. A host that fails during `up` gets one line on stderr and exit code 1;
the other hosts still come up.
"""

from __future__ import annotations

import json
import sys
import time

import click

from mainboard.cli import common
from mainboard.redact import redact_text


@click.group()
def fleet() -> None:
    """Celery workers on local, ssh, SLURM, PBS and rented hosts, watched in Flower."""


@fleet.command()
@click.option("--on", "hosts", multiple=True, metavar="HOST",
              help="Host to start a worker on (repeatable; default: every declared host "
                   "except provider hosts).")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Worker processes (Celery concurrency) on each host.")
@click.option("--queues", default=None, metavar="Q,...",
              help="Queues to consume (default: mainboard.batches); every worker also "
                   "consumes its host's own queue mainboard.host.<HOST>.")
@click.option("--walltime", default=None, metavar="T",
              help='Walltime of each worker ("2h", "01:30:00", seconds; default: host defaults).')
@click.option("--retire-before", default="5m", show_default=True, metavar="T",
              help="Stop taking tasks this long before the walltime, finish the one in hand.")
@click.option("--idle-timeout", default=None, metavar="T",
              help="Destroy a rented machine whose worker idled this long (default: "
                   "[providers.X] options.idle_timeout, else 30m).")
@click.option("--no-flower", is_flag=True, help="Do not start Flower with the fleet.")
@click.pass_context
def up(ctx: click.Context, hosts: tuple[str, ...], workers: int, queues: str | None,
       walltime: str | None, retire_before: str, idle_timeout: str | None,
       no_flower: bool) -> None:
    """Start the broker if needed, then one worker on each host."""
    from mainboard.fleet.control import fleet_up
    from mainboard.fleet.launch import UpOptions

    options = UpOptions.parse(workers=workers, queues=queues, walltime=walltime,
                              retire_before=retire_before, idle_timeout=idle_timeout)
    report = fleet_up(common.load(ctx), hosts or None, options, flower=not no_flower)
    for worker in report.started:
        via = "via tunnel" if worker.broker_via == "tunnel" else "direct"
        rental = f", rental {worker.rental['rental_id']}" if worker.rental else ""
        click.echo(f"{worker.host}: worker {worker.node} (job {worker.job['job_id']}, "
                   f"queues {','.join(worker.queues)}, broker {via}{rental})")
    if report.flower_url:
        click.echo(f"flower: {report.flower_url} (user mainboard, password in "
                   ".mainboard/flower.secret)")
    if report.flower_error:  # errors of hosts and daemons may quote a broker URL
        click.echo(f"mainboard: warning: flower did not start: "
                   f"{redact_text(str(report.flower_error))}", err=True)
    for line in report.failed.values():
        click.echo(f"mainboard: error: {redact_text(line)}", err=True)
    if report.failed:
        sys.exit(1)


def _age(ts: float | None) -> str:
    return "-" if ts is None else f"{max(0.0, time.time() - ts):.0f}s ago"


@fleet.command()
@common.json_option("One JSON list of workers.")
@click.option("--all", "include_stopped", is_flag=True, help="Include stopped workers.")
@click.pass_context
def status(ctx: click.Context, as_json: bool, include_stopped: bool) -> None:
    """Each worker: host, job, state, queues, concurrency, tasks done, last heartbeat."""
    from mainboard.fleet.status import fleet_status

    rows = fleet_status(common.load(ctx), include_stopped=include_stopped)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=1))
        return
    if not rows:
        click.echo("no fleet workers (start some with `mainboard fleet up`)")
        return
    header = ("HOST", "WORKER", "JOB", "STATE", "QUEUES", "CONC", "DONE", "HEARTBEAT")
    table = [header] + [(r.host, r.node, r.job_id, r.state, ",".join(r.queues),
                         str(r.concurrency), "-" if r.tasks_done is None else str(r.tasks_done),
                         _age(r.last_heartbeat)) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@fleet.command()
@click.option("--on", "hosts", multiple=True, metavar="HOST",
              help="Only this host's workers (repeatable; default: all).")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to let workers finish their task before cancelling the job.")
@click.pass_context
def down(ctx: click.Context, hosts: tuple[str, ...], timeout: float) -> None:
    """Drain workers (warm shutdown), cancel their jobs, destroy rentals."""
    from mainboard.fleet.control import fleet_down

    report = fleet_down(common.load(ctx), hosts or None, timeout=timeout)
    failed = False
    for worker in report.workers:
        outcome = report.outcome.get(worker.worker_id, "unknown")
        failed |= outcome.startswith("error")
        click.echo(f"{worker.host}: worker {worker.node} {outcome}")
    for rental in report.rentals_destroyed:
        click.echo(f"rental {rental} destroyed")
    if not report.workers:
        click.echo("no fleet workers were running")
    if failed:
        sys.exit(1)
