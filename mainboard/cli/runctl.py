"""`mainboard runs logs|pause|stop|remove|trace`: see and steer one run.

These read the run's receipts for who it is (RUN: id, unique id prefix or name; an
ambiguous name lists the matching ids) and the broker for what lives there (logs, spans,
the coordinator's lease). No verb here starts a broker.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mainboard.cli import common
from mainboard.cli.runs import runs

if TYPE_CHECKING:
    import redis

    from mainboard.runs.store import RunHistory, RunStore

_JSON = common.json_option()
_WAIT = click.option("--wait", "wait_s", type=click.FloatRange(min=0.1), default=120.0,
                     show_default=True, help="Seconds to wait for the coordinator to answer.")


def _open(ctx: click.Context, run: str) -> tuple[RunStore, RunHistory, redis.Redis | None]:
    from mainboard.runs.control import connect
    from mainboard.runs.store import RunStore

    config = common.load(ctx)
    store = RunStore(config.state_dir)
    history = store.find(run)
    return store, history, connect(config)


def _need(r: redis.Redis | None) -> redis.Redis:
    from mainboard.errors import BrokerError

    if r is None:
        raise BrokerError("the embedded broker is not running, and a run's logs and spans "
                          "live in it; start it with `mainboard broker up`")
    return r


@runs.command("logs")
@click.argument("run")
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing lines as they come, until the run is no longer driven.")
@click.option("--level", type=click.Choice(["trace", "debug", "info", "warn", "error"]),
              default=None, help="Only lines at this level or above.")
@click.option("--tail", type=click.IntRange(min=1), default=None,
              help="Only the last N lines (before following).")
@common.json_option("One JSON object per line (ts, level, worker, host, message, "
                    "iteration, batch, stage, id).")
@click.pass_context
def logs(ctx: click.Context, run: str, follow: bool, level: str | None, tail: int | None,
         as_json: bool) -> None:
    """What the run's workers logged (stage errors, re-sends, process stderr and @gblog
    lines), merged in time order. Exit 2 for an unknown or ambiguous RUN."""
    from mainboard.runs.control import live
    from mainboard.runs.logs import follow_logs, last_id, log_counts, read_logs

    _store, history, r = _open(ctx, run)
    r = _need(r)

    def show(line: Any) -> None:
        if as_json:
            common.echo_json(line.to_dict())
        else:
            common.echo(line.text())

    with common.streaming():
        cursor = last_id(r, history.run_id)
        for line in read_logs(r, history.run_id, level=level, limit=tail,
                              upto=cursor):
            show(line)
        kept, dropped = log_counts(r, history.run_id)
        if dropped:
            common.echo(f"({dropped:,} older lines were dropped; the log keeps the last "
                        f"{kept:,})", err=True)
        if follow:
            for line in follow_logs(r, history.run_id, level=level, after=cursor,
                                    live=lambda: live(r, history.run_id)):
                show(line)


def _control(ctx: click.Context, run: str, what: str, wait_s: float, as_json: bool) -> None:
    from mainboard.runs.control import request

    store, history, r = _open(ctx, run)
    outcome = request(r, store, history, what, wait_s=wait_s)
    if as_json:
        common.echo_json({"run_id": outcome.run_id, "status": outcome.status,
                          "iterations": outcome.iteration})
        return
    common.echo(f"run {outcome.run_id} {outcome.status} after iteration {outcome.iteration}"
                + ("; `mainboard runs resume` continues it" if outcome.status == "paused"
                  else ""))


@runs.command("pause")
@click.argument("run")
@_WAIT
@_JSON
@click.pass_context
def pause(ctx: click.Context, run: str, wait_s: float, as_json: bool) -> None:
    """Pause a running run at the next batch boundary (in-flight batches finish and are kept);
    `runs resume` continues it with the numbers of an uninterrupted run."""
    _control(ctx, run, "pause", wait_s, as_json)


@runs.command("stop")
@click.argument("run")
@_WAIT
@_JSON
@click.pass_context
def stop(ctx: click.Context, run: str, wait_s: float, as_json: bool) -> None:
    """Stop a running run at the next batch boundary; it ends as stopped with its partial
    result (`runs show` prints it)."""
    _control(ctx, run, "stop", wait_s, as_json)


@runs.command("remove")
@click.argument("run")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_JSON
@click.pass_context
def remove(ctx: click.Context, run: str, yes: bool, as_json: bool) -> None:
    """Delete a run's receipts and every Redis key of it, a parent's child runs with it
    (refused while any of them runs)."""
    from mainboard.runs.control import child_ids, live
    from mainboard.runs.control import remove as remove_run

    store, history, r = _open(ctx, run)
    children = len(child_ids(history))
    label = f"{history.run_id} ({history.created.name}, {history.status})" + (
        f" and its {children} child runs" if children else "")
    if not yes and not live(r, history.run_id):
        if not sys.stdin.isatty():
            raise click.UsageError(f"removing run {label} needs confirmation: pass --yes")
        click.confirm(f"remove run {label} with its receipts and Redis keys?", abort=True,
                      err=True)
    keys_gone = remove_run(r, store, history)
    if as_json:
        common.echo_json({"run_id": history.run_id, "removed": True, "redis_keys": keys_gone,
                          "child_runs": children})
        return
    common.echo(f"removed run {label}: receipts and {keys_gone} Redis keys")


@runs.command("trace")
@click.argument("run")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="Where to write the trace (Trace Event Format JSON).")
@_JSON
@click.pass_context
def trace(ctx: click.Context, run: str, output: Path, as_json: bool) -> None:
    """Write the run's stage spans as one Chrome/Perfetto trace: a track per worker (grouped
    by host, clocks aligned on the broker's), the coordinator's phases on their own track.
    Open it in https://ui.perfetto.dev or chrome://tracing."""
    from mainboard.runs.trace import run_trace, write_trace

    store, history, r = _open(ctx, run)
    doc = run_trace(_need(r), store, history.run_id)
    write_trace(doc, output)
    summary = doc["otherData"]
    if as_json:
        common.echo_json({"run_id": history.run_id, "output": str(output), **summary})
        return
    common.echo(f"wrote {output}: {summary['spans']} spans on {summary['workers']} workers "
                f"({summary['hosts']} hosts)")
