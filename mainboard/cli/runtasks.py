"""`mainboard runs tasks|append`: a run's task list, and tasks added to it.

Why apart from `runs`: the task list has its own table (one row per task with its state
and its own estimate) and its own write path (``append``, under the run's lease).
"""

from __future__ import annotations

import json
from typing import Any

import click

from mainboard.cli import common
from mainboard.cli.runs import runs

_JSON = common.json_option()


def _line(row: dict[str, Any]) -> str:
    from mainboard.cli.runview import pm

    value = "-" if row["estimate"] is None else pm(row["estimate"], row["error"])
    if "points" in row:
        value = f"{row['points']} points (`mainboard runs export {{RUN}} --format csv`)"
    kind = row["kind"] + (" frozen" if row.get("frozen") else "")
    origin = f"from {row['from']}" if row["from"] is not None else ""
    return (f"{row['index']:>3}  {row['name'][:20]:20}  {kind[:16]:16}  {row['state']:8}  "
            f"{origin[:20]:20}  {row['samples']:>12,}  {value}")


@runs.command("tasks")
@click.argument("run")
@_JSON
@click.pass_context
def tasks(ctx: click.Context, run: str, as_json: bool) -> None:
    """A run's tasks in order: state, samples and estimate ± error of each."""
    from mainboard.runs.store import RunStore
    from mainboard.runs.tasktable import task_rows

    config = common.load(ctx)
    history = RunStore(config.state_dir).find(run)
    rows = task_rows(history)
    if as_json:
        common.echo_json({"run_id": history.run_id, "status": history.status, "tasks": rows})
        return
    if not rows:
        click.echo(f"run {history.run_id} has no [[tasks]]: it is one sample task "
                   f"(`mainboard runs show {history.run_id}`)")
        return
    click.echo(f"{'#':>3}  {'TASK':20}  {'KIND':16}  {'STATE':8}  {'FROM':20}  "
               f"{'SAMPLES':>12}  ESTIMATE")
    for row in rows:
        click.echo(_line(row).replace("{RUN}", history.run_id))


@runs.command("append")
@click.argument("run")
@click.argument("task_file", type=click.Path(dir_okay=False))
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Local batch workers for a finished run that goes on (default: the "
                   "fleet, else one per core; 0: the fleet only).")
@_JSON
@click.pass_context
def append(ctx: click.Context, run: str, task_file: str, workers: int | None,
           as_json: bool) -> None:
    """Add the [[tasks]] of TASK_FILE to RUN: a live run takes them before it would
    finish; a finished run goes on with them now; a paused or interrupted one runs them
    on `runs resume`. Refused when RUN is driven by a coordinator that cannot take them
    (a scan/tune/campaign child, or a run driven from another workspace)."""
    from mainboard.cli.runview import result_json, result_text
    from mainboard.tasks.appends import Appended
    from mainboard.tasks.runner import append as append_tasks

    config = common.load(ctx)
    result = append_tasks(run, task_file, workers, config=config)
    if not isinstance(result, Appended):  # a finished run went on with them
        if as_json:
            click.echo(json.dumps({**json.loads(result_json(result)), "live": False}))
        else:
            click.echo(result_text(result))
        return
    if as_json:
        common.echo_json({"run_id": result.run_id, "appended": result.tasks,
                          "live": result.live, "by": result.by,
                          "continues": None if result.live else "runs resume"})
    elif result.live:
        click.echo(f"appended {result.tasks} task(s) to run {result.run_id}: the live run "
                   f"({result.by}) takes them before it would finish")
    else:
        click.echo(f"appended {result.tasks} task(s) to run {result.run_id}; "
                   f"`mainboard runs resume {result.run_id}` runs the new tasks")
