"""CLI verb `fleet`: Celery workers on your hosts — `up`, `status`, `down`.

    mainboard fleet up [--on HOST ... | --pool NAME ...] [--jobs N] [--workers N] [--queues Q,...]
                       [--walltime T] [--json]
    mainboard fleet status [--json] [--all | --pools]
    mainboard fleet down [--on HOST ...] [--force] [--json]
    mainboard fleet resume-pool NAME

Heavy imports (Celery, paramiko, redis) happen inside the commands, so other verbs
start fast. A host that fails during `up` gets one line on stderr and exit code 1;
the other hosts still come up. A broker that does not answer is one line naming its
host:port and the fix, exit 1 (see :func:`mainboard.fleet.control.fleet_broker`).
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import click

from mainboard.cli import common
from mainboard.cli.broker import STATUS_DOWN
from mainboard.redact import redact_text

if TYPE_CHECKING:
    from mainboard.receipts import WorkerStarted



def _worker(worker: WorkerStarted) -> dict[str, object]:
    """One worker in `up --json` and `down --json`."""
    return {"host": worker.host, "worker_id": worker.worker_id, "node": worker.node,
            "job_id": worker.job["job_id"], "queues": list(worker.queues),
            "concurrency": worker.concurrency, "broker_via": worker.broker_via,
            "rental_id": worker.rental["rental_id"] if worker.rental else None,
            "nodes": worker.nodes}


@click.group()
def fleet() -> None:
    """Celery workers on local, ssh, SLURM, PBS and rented hosts, watched in Flower."""


@fleet.command()
@click.option("--on", "hosts", multiple=True, metavar="HOST",
              help="Host to start a worker on, a one-off pool (repeatable: twice means 2 "
                   "allocations; default: every [fleet.pools.NAME], else every declared host "
                   "except provider hosts).")
@click.option("--pool", "pools", multiple=True, metavar="NAME",
              help="Only this [fleet.pools.NAME] (repeatable; default: all pools).")
@click.option("--jobs", type=int, default=None, metavar="N",
              help="Allocations per pool (a target: what already runs counts; default: the "
                   "pool's jobs, or 1).")
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
@common.json_option("Print one JSON object (shape above).")
@click.pass_context
def up(ctx: click.Context, hosts: tuple[str, ...], pools: tuple[str, ...], jobs: int | None,
       workers: int, queues: str | None,
       walltime: str | None, retire_before: str, idle_timeout: str | None,
       no_flower: bool, as_json: bool) -> None:
    """Start the broker if needed, then bring each pool to its count of allocations.

    A repeated `fleet up` starts only what is missing (stderr says what already runs).

    Exit 0 when every host came up, 1 when one failed (one line each on stderr; the
    others still come up) or the broker does not answer, 2 for bad options.

    \b
    --json prints one object:
      {"started": [{"host", "worker_id", "node", "job_id", "queues", "concurrency",
                    "broker_via", "rental_id", "nodes"}, ...],
       "failed": {HOST: "one line", ...}, "kept": {POOL: allocations already live},
       "flower_url": URL|null, "flower_error": str|null}
    """
    from mainboard.fleet.control import fleet_up
    from mainboard.fleet.launch import UpOptions

    options = UpOptions.parse(workers=workers, queues=queues, walltime=walltime,
                              retire_before=retire_before, idle_timeout=idle_timeout)
    report = fleet_up(common.load(ctx), hosts or None, options, flower=not no_flower,
                      pools=pools, jobs=jobs)
    flower_error = redact_text(report.flower_error) if report.flower_error else None
    failed = {host: redact_text(line) for host, line in report.failed.items()}
    if as_json:
        common.echo_json({"started": [_worker(w) for w in report.started], "failed": failed,
                          "kept": report.kept, "flower_url": report.flower_url,
                          "flower_error": flower_error})
    else:
        for worker in report.started:
            via = "direct" if worker.broker_via == "direct" else f"via {worker.broker_via}"
            rental = f", rental {worker.rental['rental_id']}" if worker.rental else ""
            nodes = f", {worker.nodes} nodes: one worker each" if worker.nodes > 1 else ""
            common.echo(f"{worker.host}: worker {worker.node} (job {worker.job['job_id']}{nodes}, "
                        f"queues {','.join(worker.queues)}, broker {via}{rental})")
        if report.flower_url:
            common.echo(f"flower: {report.flower_url} (user mainboard, password in "
                        ".mainboard/flower.secret)")
    for pool, kept in report.kept.items():
        if kept:
            common.echo(f"mainboard: {pool}: {kept} allocation(s) already live, counted toward "
                        "its target (raise it with --jobs N)", err=True)
    if flower_error:  # errors of hosts and daemons may quote a broker URL
        common.warn(f"flower did not start: {flower_error}")
    for line in failed.values():
        common.echo(f"mainboard: error: {line}", err=True)
    if failed:
        sys.exit(1)


def _age(ts: float | None) -> str:
    return "-" if ts is None else f"{max(0.0, time.time() - ts):.0f}s ago"


@fleet.command()
@common.json_option("One JSON list of workers.")
@click.option("--all", "include_stopped", is_flag=True, help="Include stopped workers.")
@click.option("--pools", "by_pool", is_flag=True,
              help="One row per [fleet.pools.NAME]: target, pending, running, idle, lost, "
                   "queue depth (--json: a list of objects with those keys).")
@click.pass_context
def status(ctx: click.Context, as_json: bool, include_stopped: bool, by_pool: bool) -> None:
    """Each worker: host, job, state, queues, concurrency, tasks done, last heartbeat.

    Exit 0 when a worker is alive (online or starting) or none is expected; 3 when the
    fleet has workers but none is alive (all queued, lost, unknown or ended),
    like `systemctl status` (the table or JSON list is printed for both); 1 when the
    broker does not answer (one line on stderr, nothing on stdout).
    """
    from mainboard.fleet.status import fleet_status, pool_status

    if by_pool:
        _pools(pool_status(common.load(ctx)), as_json)
        return
    rows = fleet_status(common.load(ctx), include_stopped=include_stopped)
    live = [r for r in rows if not r.stopped]
    code = STATUS_DOWN if live and not any(r.alive for r in live) else 0
    if as_json:
        common.echo(json.dumps([r.to_dict() for r in rows], indent=1))
        sys.exit(code)
    if not rows:
        common.echo("no fleet workers (start some with `mainboard fleet up`)")
        return
    header = ("HOST", "WORKER", "PROCESS", "JOB", "STATE", "QUEUES", "CONC", "DONE",
              "HEARTBEAT")
    table = [header] + [(r.host, r.node, (r.uuid or "-")[:8], r.job_id, r.state,
                         ",".join(r.queues),
                         str(r.concurrency), "-" if r.tasks_done is None else str(r.tasks_done),
                         _age(r.last_heartbeat)) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        common.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    sys.exit(code)


def _pools(rows: list[dict[str, object]], as_json: bool) -> None:
    if as_json:
        common.echo(json.dumps(rows, indent=1))
        return
    if not rows:
        common.echo("no pools declared (add [fleet.pools.NAME] to mainboard.toml)")
        return
    keys = ("pool", "host", "target", "pending", "running", "idle", "lost", "queue_depth",
            "outstanding")
    table = [tuple(k.upper().replace("_", " ") for k in keys)] + [
        tuple(str(r[k]) + (" (paused)" if k == "pool" and r["paused"] else "") for k in keys)
        for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(keys))]
    for row in table:
        common.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@fleet.command()
@click.option("--on", "hosts", multiple=True, metavar="HOST",
              help="Only this host's workers (repeatable; default: all).")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to let workers finish their task before cancelling the job.")
@click.option("--force", is_flag=True,
              help="Forget workers whose host cannot be reached (one line each says what may "
                   "still run there and how to end it); exit 0.")
@common.json_option("Print one JSON object (shape above).")
@click.pass_context
def down(ctx: click.Context, hosts: tuple[str, ...], timeout: float, force: bool,
         as_json: bool) -> None:
    """Drain workers (warm shutdown), cancel their jobs, destroy rentals.

    Draining needs the broker: when it does not answer (a configured [broker] url, or
    the embedded broker the workers use), nothing is stopped and the one line on
    stderr says how to bring it back (exit 1). Exit 1 too when a worker could not be
    stopped (its outcome starts with "error"); with --force an unreachable host's
    worker is forgotten instead (outcome "forgotten: ...", one warning line, exit 0).

    \b
    --json prints one object:
      {"workers": [{"host", "worker_id", "node", "job_id", "queues", "concurrency",
                    "broker_via", "rental_id", "outcome"}, ...],
       "rentals_destroyed": [RENTAL_ID, ...]}
    """
    from mainboard.fleet.control import fleet_down

    report = fleet_down(common.load(ctx), hosts or None, timeout=timeout, force=force)
    outcomes = {w.worker_id: report.outcome.get(w.worker_id, "unknown") for w in report.workers}
    for outcome in outcomes.values():
        if outcome.startswith("forgotten: "):
            common.warn(outcome.removeprefix('forgotten: '))
    if as_json:
        common.echo_json({"workers": [{**_worker(w), "outcome": outcomes[w.worker_id]}
                                      for w in report.workers],
                          "rentals_destroyed": report.rentals_destroyed})
    else:
        for worker in report.workers:
            said = outcomes[worker.worker_id]
            said = "forgotten" if said.startswith("forgotten: ") else said  # hint: stderr
            common.echo(f"{worker.host}: worker {worker.node} {said}")
        for rental in report.rentals_destroyed:
            common.echo(f"rental {rental} destroyed")
        if not report.workers:
            common.echo("no fleet workers were running")
    if any(outcome.startswith("error") for outcome in outcomes.values()):
        if not force and any("cannot reach" in o or "unreachable" in o for o in outcomes.values()):
            common.echo("mainboard: hint: `mainboard fleet down --force` forgets workers on "
                        "hosts that cannot be reached", err=True)
        sys.exit(1)


@fleet.command("resume-pool")
@click.argument("name")
@click.pass_context
def resume_pool(ctx: click.Context, name: str) -> None:
    """Let a pool paused after failed submissions submit again (exit 2: no such pool)."""
    from mainboard.fleet.control import resume_pool as resume

    resume(common.load(ctx), name)
    common.echo(f"pool {name}: resumed; the fleet keeper submits again when work waits")


_QUEUES = click.option("--queues", default=None, metavar="Q[,Q...]",
                       help="Queue names (roles): mainboard.batches evaluates batches, "
                            "mainboard.coordinator owns runs.")
_ROLE = click.option("--role", type=click.Choice(["evaluator", "coordinator"]), default=None,
                     help="Shorthand: evaluator = mainboard.batches, coordinator = "
                          "mainboard.coordinator.")


def _roles(ctx: click.Context, name: str, queues: str | None, role: str | None, *,
           consume: bool, as_json: bool) -> None:
    from mainboard.fleet.roles import change_roles, find_worker, queues_of

    config = common.load(ctx)
    wanted = queues_of(queues, role)
    change = change_roles(config, find_worker(config, name), wanted, consume=consume)
    if as_json:
        common.echo_json({"worker_id": change.worker.worker_id, "node": change.worker.node,
                          "queues": change.queues, "consume": consume,
                          "consumed": change.consumed})
        return
    verb = "consumes" if consume else "no longer consumes"
    common.echo(f"{change.worker.host}: worker {change.worker.node} {verb} "
               f"{','.join(change.queues)}")
    for node, now in change.consumed.items():
        common.echo(f"  {node}: consuming {','.join(now) or 'nothing'}")
    if not change.consumed:
        common.warn(f"worker {change.worker.node} has not started yet: it takes the roles "
                    "when it does")


def _role_verb(name: str, consume: bool, doc: str) -> None:
    """``fleet assign`` and ``fleet unassign``: one shape, the direction apart."""
    @fleet.command(name, help=doc)
    @click.argument("worker")
    @_QUEUES
    @_ROLE
    @common.json_option("Print one JSON object: worker_id, node, queues, consume, consumed.")
    @click.pass_context
    def verb(ctx: click.Context, worker: str, queues: str | None, role: str | None,
             as_json: bool) -> None:
        _roles(ctx, worker, queues, role, consume=consume, as_json=as_json)


_role_verb("assign", True, "Make a live WORKER (worker id or node name) consume more queues, "
           "now and after a restart (Celery's add_consumer; recorded).")
_role_verb("unassign", False, "Make a live WORKER stop consuming queues; the task in hand "
           "finishes (Celery's cancel_consumer; recorded, so a restarted worker keeps it).")


@fleet.command()
@click.argument("worker")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to let the worker finish its task before cancelling the job.")
@common.json_option("Print one JSON object: worker_id, node, outcome.")
@click.pass_context
def stop(ctx: click.Context, worker: str, timeout: float, as_json: bool) -> None:
    """Stop one live WORKER warm (its task in hand finishes) and end its allocation; its
    pool may start a replacement. Exit 1 when it could not be stopped."""
    from mainboard.fleet.roles import find_worker, stop_one

    config = common.load(ctx)
    found = find_worker(config, worker)
    outcome = stop_one(config, found, timeout=timeout)
    if as_json:
        common.echo_json({"worker_id": found.worker_id, "node": found.node, "outcome": outcome})
    else:
        common.echo(f"{found.host}: worker {found.node} {outcome}")
    if outcome.startswith("error"):
        sys.exit(1)
