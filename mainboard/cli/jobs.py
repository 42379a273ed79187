"""`mainboard jobs list|show|logs|pull|cancel`: jobs of this workspace, read from their receipts.

``list`` and ``show`` read only ``.mainboard/jobs/*.ndjson`` (no host is contacted;
``show --refresh`` asks the host). An unreadable receipt line is a warning naming its
file and line; the other jobs are still shown. JOB is an id or a unique id suffix.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mainboard.cli import common

if TYPE_CHECKING:
    from mainboard.jobs.store import JobView

_JSON = common.json_option()


def _row(view: JobView) -> str:
    when = dt.datetime.fromtimestamp(view.submitted.submitted_at).strftime("%Y-%m-%d %H:%M:%S")
    code = "" if view.exit_code is None else str(view.exit_code)
    return f"{view.id:<40} {view.host:<12} {view.state.value:<10} {code:>4}  {when}  {view.name}"


@click.group("jobs")
def jobs() -> None:
    """Batch jobs of this workspace: list, show, logs, pull, cancel."""


@jobs.command("list")
@click.option("--host", default=None, help="Only jobs on this host.")
@_JSON
@click.pass_context
def list_jobs(ctx: click.Context, host: str | None, as_json: bool) -> None:
    """Every job with receipts, oldest first (no host is contacted)."""
    from mainboard.jobs.store import JobStore

    config = common.load(ctx)
    views, errors = JobStore(config.state_dir).scan()
    views = [v for v in views if host is None or v.host == host]
    if as_json:
        common.echo_json({"jobs": [v.as_json() for v in views], "errors": [str(e) for e in errors]})
        return
    for error in errors:
        common.warn(error)
    if not views:
        common.echo("no jobs yet (submit one with `mainboard submit --on HOST -- CMD`)")
        return
    common.echo(f"{'ID':<40} {'HOST':<12} {'STATE':<10} {'EXIT':>4}  {'SUBMITTED':<19}  NAME")
    for view in views:
        common.echo(_row(view))


@jobs.command("show")
@click.argument("job")
@click.option("--refresh", is_flag=True, help="Ask the host first (records any news).")
@_JSON
@click.pass_context
def show(ctx: click.Context, job: str, refresh: bool, as_json: bool) -> None:
    """One job: what it asked for, where it runs, its state and outcome."""
    if refresh:
        from mainboard.jobs.job import Job

        with common.board(ctx) as board:
            handle = Job(board, job)
            handle.poll()
            view = handle.view()
    else:
        from mainboard.jobs.store import JobStore

        config = common.load(ctx)
        view = JobStore(config.state_dir).load(job)
    data = view.as_json()
    if as_json:
        common.echo_json(data)
        return
    spec = {k: v for k, v in data["spec"].items() if v not in (None, [], {})}
    for key in ("id", "name", "host", "kind", "job_id", "state", "exit_code", "reason",
                "job_dir", "root", "data", "fetch", "pulled"):
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
