"""`mainboard runs tasks|append`: a run's task list, and tasks added to it.

Why apart from `runs`: the task list has its own table (one row per task with its state
and its own estimate) and its own write path (``append``, under the run's lease).
"""

from __future__ import annotations

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
    from mainboard.tasks.tasklist import task_rows

    config = common.load(ctx)
    history = RunStore(config.state_dir).find(run)
    rows = task_rows(history)
    if as_json:
        common.echo_json({"run_id": history.run_id, "status": history.status, "tasks": rows})
        return
    click.echo(f"{'#':>3}  {'TASK':20}  {'KIND':16}  {'STATE':8}  {'FROM':20}  "
               f"{'SAMPLES':>12}  ESTIMATE")
    for row in rows:
        click.echo(_line(row).replace("{RUN}", history.run_id))
