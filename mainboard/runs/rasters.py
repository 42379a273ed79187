"""The values of a run's ``plot_line`` and ``image`` tasks, as CSV rows.

Why from receipts: a task's values are stored in its ``run.task_done`` line, so they are
exported after the broker and the workers are gone, like every other run result.
"""

from __future__ import annotations

import csv
import io

from mainboard.receipts import TaskDone
from mainboard.runs.store import RunHistory

COORDINATES = ("t", "u", "v")


def raster_tasks(history: RunHistory) -> list[TaskDone]:
    """The run's done tasks that carry values, in task order."""
    done = [t for t in history.tasks if isinstance(t, TaskDone) and t.values is not None]
    return sorted(done, key=lambda t: t.index)


def csv_text(history: RunHistory) -> str:
    """One row per point: task, kind, point, its coordinates (t on a line, u and v on a
    plane; the others empty) and the integrand's value columns (value, or real and imag,
    or value_i)."""
    tasks = raster_tasks(history)
    width = max((len(t.values["columns"]) for t in tasks if t.values), default=1)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    names = tasks[0].values["columns"] if tasks and tasks[0].values and all(
        t.values and t.values["columns"] == tasks[0].values["columns"] for t in tasks) \
        else [f"value_{i}" for i in range(width)]
    writer.writerow(["task", "kind", "point", *COORDINATES, *names])
    for task in tasks:
        values = task.values or {}
        for i, row in enumerate(values["values"]):
            coords = [values[c][i] if c in values else "" for c in COORDINATES]
            writer.writerow([task.name, task.kind, i, *coords, *[repr(float(v)) for v in row]])
    return out.getvalue()


__all__ = ["csv_text", "raster_tasks"]
