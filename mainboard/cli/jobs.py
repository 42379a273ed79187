"""`mainboard jobs list|show|logs|pull|cancel`: jobs of this workspace, read from their receipts.

``list`` and ``show`` first ask the hosts of unfinished jobs (``mainboard.jobs.live``:
one query per host, bounded in time), so a state is never only as fresh as the last
monitor pass; ``--cached`` reads ``.mainboard/jobs/*.ndjson`` alone and says how old
each state is. An unreadable receipt line is a warning naming its file and line; the
other jobs are still shown. JOB is mainboard's id, a unique suffix of it, or the
scheduler's id (what `submit` printed on a SLURM or PBS host; `JobStore.resolve`).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mainboard.cli import common

if TYPE_CHECKING:
    from mainboard.jobs.live import Sweep

_JSON = common.json_option()
_CACHED = click.option("--cached", is_flag=True,
                       help="Receipts only, no host asked: each state with how old it is.")
_TIMEOUT = click.option("--timeout", type=click.FloatRange(min=0.1), default=None, metavar="S",
                        help="Seconds to wait for each host's answer (default 10); a host "
                             "past it keeps its jobs' last recorded states, marked stale.")


def _age(seconds: float) -> str:
    """``42s``, ``3m``, ``5h``, ``2d``: how old a state is, in one short word."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _row(entry: dict[str, Any]) -> str:
    when = dt.datetime.fromtimestamp(entry["submitted_at"]).strftime("%Y-%m-%d %H:%M:%S")
    code = "" if entry["exit_code"] is None else str(entry["exit_code"])
    age = _age(entry["state_age_s"]) + (" stale" if entry["stale"] else "")
    return (f"{entry['id']:<40} {entry['host']:<12} {entry['state']:<10} {code:>4}  {age:<9}  "
            f"{when}  {entry['name']}")


def _look(ctx: click.Context, cached: bool, timeout: float | None, *,
          only: str | None = None, host: str | None = None) -> tuple[Sweep, str | None]:
    """Every job, its states as of now (or as recorded, ``cached``); the id ``only`` names.

    One line on stderr per host that did not answer: its jobs keep their recorded state.
    """
    from mainboard.jobs import live
    from mainboard.jobs.store import JobStore

    if cached:
        store = JobStore(common.load(ctx).state_dir)
        return live.cached(store), None if only is None else store.load(only).id
    from mainboard.board import Board
    from mainboard.fleet.workers import scheduler_share

    board, late = Board(common.config_path(ctx)), False
    try:
        job_id = None if only is None else JobStore(board.config.state_dir).load(only).id
        look = live.sweep(board, only=None if job_id is None else {job_id}, host=host,
                          timeout=live.PROBE_TIMEOUT_S if timeout is None else timeout,
                          share=scheduler_share(board.config))
        late = look.late
    finally:  # a host still connecting past the budget would hold the close up: exit ends it
        if not late:
            board.close()
    for name, why in sorted(look.unreachable.items()):
        owed = sum(1 for v in look.views if v.host == name and look.stale(v))
        common.warn(f"host {name} did not answer ({why}); its {owed} unfinished job(s) show "
                    "their last recorded state, marked stale; check the host, or read the "
                    "receipts alone with --cached")
    return look, job_id


@click.group("jobs")
def jobs() -> None:
    """Batch jobs of this workspace: list, show, logs, pull, cancel.

    JOB is mainboard's id, a unique suffix of it, or the scheduler's id (what
    `submit` prints on SLURM and PBS hosts)."""


@jobs.command("list")
@click.option("--host", default=None, help="Only jobs on this host.")
@_CACHED
@_TIMEOUT
@_JSON
@click.pass_context
def list_jobs(ctx: click.Context, host: str | None, cached: bool, timeout: float | None,
              as_json: bool) -> None:
    """Every job, oldest first, in its current state: the hosts of unfinished jobs are
    asked once each (news is recorded as receipts). AGE is how long ago the state was
    last known true; `stale`: the host did not answer, the state is the last recorded."""
    look, _ = _look(ctx, cached, timeout, host=host)
    now = dt.datetime.now().timestamp()
    rows = [look.entry(v, now) for v in look.views if host is None or v.host == host]
    if as_json:
        common.echo_json({"jobs": rows, "errors": [str(e) for e in look.errors],
                          "cached": look.cached, "unreachable_hosts": look.unreachable})
        return
    for error in look.errors:
        common.warn(error)
    if not rows:
        common.echo("no jobs yet (submit one with `mainboard submit --on HOST -- CMD`)")
        return
    common.echo(f"{'ID':<40} {'HOST':<12} {'STATE':<10} {'EXIT':>4}  {'AGE':<9}  "
               f"{'SUBMITTED':<19}  NAME")
    for row in rows:
        common.echo(_row(row))


@jobs.command("show")
@click.argument("job")
@_CACHED
@_TIMEOUT
@click.option("--refresh", is_flag=True, hidden=True, help="What show does by default now.")
@_JSON
@click.pass_context
def show(ctx: click.Context, job: str, cached: bool, timeout: float | None, refresh: bool,
         as_json: bool) -> None:
    """One job: what it asked for, where it runs, its current state (its host is asked
    unless it has ended or --cached) and outcome."""
    look, job_id = _look(ctx, cached, timeout, only=job)
    data = next(look.entry(v) for v in look.views if v.id == job_id)
    if as_json:
        common.echo_json({**data, "cached": look.cached})
        return
    spec = {k: v for k, v in data["spec"].items() if v not in (None, [], {})}
    data["state"] += f" ({_age(data['state_age_s'])} ago" + (
        ", stale: the host did not answer)" if data["stale"] else ")")
    cost = data["cost"]
    if cost is not None:  # what it has cost by the last observation (submit, pass, end)
        data["cost"] = (cost["source"] if cost["usd_hr"] is None else  # "rate unknown: why"
                        f"${cost['usd']:.4f} for {cost['seconds']:.0f}s at "
                        f"${cost['usd_hr']:g}/h ({cost['source']}; as of its {cost['at']})")
    for key in ("id", "name", "host", "kind", "job_id", "state", "exit_code", "reason",
                "job_dir", "root", "data", "fetch", "pulled", "cost"):
        if data[key] not in (None, "", []):
            common.echo(f"{key + ':':<10} {data[key]}")
    common.echo(f"{'spec:':<10} {json.dumps(spec)}")


@jobs.command("logs")
@click.argument("job")
@click.option("--tail", type=click.IntRange(min=1), default=None, metavar="N",
              help="Only the last N lines (with --follow: start from them).")
@click.option("--stderr", "stderr_", is_flag=True, help="The job's stderr instead of stdout.")
@click.option("-f", "--follow", is_flag=True,
              help="Keep printing new output until the job ends, like `tail -f`.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=0.5, show_default=True,
              metavar="S", help="With --follow: seconds between reads.")
@click.pass_context
def logs(ctx: click.Context, job: str, tail: int | None, stderr_: bool, follow: bool,
         interval: float) -> None:
    """The job's stdout (or stderr) so far, read from its host.

    With --follow the output is streamed as it arrives (local, ssh and scheduler hosts
    alike) until the job's state is final and its file is drained; then the exit code is
    0 whatever the job's own outcome (`mainboard jobs show JOB` says how it ended).
    Ctrl-C stops following (exit 130) and leaves the job running.
    """
    from mainboard.jobs.job import Job

    stream = "stderr" if stderr_ else "stdout"
    with common.board(ctx) as board:
        handle = Job(board, job)
        if not follow:
            common.echo(handle.logs(tail=tail, stream=stream), nl=False)
            return
        with common.streaming():
            for chunk in handle.logs(tail=tail, stream=stream, follow=True, interval=interval):
                common.echo(chunk, nl=False)  # flushed: each chunk shows as it arrives


@jobs.command("pull")
@click.argument("job")
@_JSON
@click.pass_context
def pull(ctx: click.Context, job: str, as_json: bool) -> None:
    """Copy the job's fetch paths from its host into the workspace."""
    from mainboard.jobs.job import Job

    with common.board(ctx) as board:
        payload = Job(board, job).pull()
    if as_json:
        common.echo_json(payload.model_dump(mode="json"))
        return
    if payload.error:
        raise click.ClickException(f"nothing pulled: {payload.error}")
    common.echo(f"pulled: {', '.join(payload.paths) or 'nothing'}"
                + (f"; missing on the host: {', '.join(payload.missing)}" if payload.missing else ""))


@jobs.command("cancel")
@click.argument("job")
@common.json_option('One JSON object: {"id": job id, "host": host name, "job_id": the '
                    'scheduler\'s id, "state": the job\'s state after the cancel (e.g. '
                    '"cancelled"; a job that had already ended keeps its final state)}.')
@click.pass_context
def cancel(ctx: click.Context, job: str, as_json: bool) -> None:
    """Stop the job on its host (a finished job is left as it is).

    Prints `ID: STATE` on stdout (STATE as seen after the cancel), or with --json the
    object described there; always those keys, in that order.
    """
    from mainboard.jobs.job import Job

    with common.board(ctx) as board:
        handle = Job(board, job)
        state = handle.cancel()
        view = handle.view()
    if as_json:
        common.echo_json({"id": handle.id, "host": view.host, "job_id": view.submitted.job_id,
                          "state": state.value})
        return
    common.echo(f"{handle.id}: {state.value}")


@jobs.command("trace")
@click.argument("job")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the trace (Trace Event Format JSON).")
@_JSON
@click.pass_context
def trace(ctx: click.Context, job: str, output: Path, as_json: bool) -> None:
    """Write the job's phases (sync, submit, queue wait, run, pull) as a Chrome/Perfetto
    trace, the same format as `mainboard runs trace`."""
    from mainboard.jobs.job import Job
    from mainboard.jobs.trace import job_phases
    from mainboard.runs.trace import TraceSpan, chrome_trace, write_trace

    with common.board(ctx) as board:
        handle = Job(board, job)
        view = handle.view()
        phases = job_phases(handle.store, handle.id)
    spans = [TraceSpan(view.host, f"{view.name} ({handle.id})", p.name, p.start,
                       p.end - p.start, {"job": handle.id}) for p in phases]
    write_trace(chrome_trace(spans, {"job": handle.id, "host": view.host}), output)
    if as_json:
        common.echo_json({"id": handle.id, "output": str(output),
                          "phases": {p.name: round(p.end - p.start, 6) for p in phases}})
        return
    common.echo(f"wrote {output}: " + ", ".join(f"{p.name} {p.end - p.start:.3f}s"
                                                for p in phases))
