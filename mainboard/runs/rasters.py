"""The values of a run's ``plot_line`` and ``image`` tasks, as CSV rows and as the
dashboard's line plots and heat maps.

Why from receipts: a task's values are stored in its ``run.task_done`` line, so they are
exported after the broker and the workers are gone, like every other run result.
"""

from __future__ import annotations

import csv
import io
from typing import Any

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


def _distinct(xs: list[float]) -> list[float]:
    """The values of one raster axis in first-seen order (an image: v outer, u inner)."""
    return list(dict.fromkeys(xs))


def raster_views(history: RunHistory) -> list[dict[str, Any]]:
    """What the dashboard draws of each done plot_line (``x`` and one ``y`` list per value
    column) and image (its ``u`` and ``v`` axes and ``z``, one row of the first value
    column per v, u inner, with its ``zmin``/``zmax``), in task order."""
    out = []
    for task in raster_tasks(history):
        values = task.values or {}
        columns = list(values.get("columns") or [])
        rows = values.get("values") or []
        view: dict[str, Any] = {"index": task.index, "name": task.name, "kind": task.kind,
                                "columns": columns}
        if task.kind == "plot_line":
            view.update(x=values.get("t") or [],
                        y=[[float(r[j]) for r in rows] for j in range(len(columns))])
        else:
            us, vs = _distinct(values.get("u") or []), _distinct(values.get("v") or [])
            flat = [float(r[0]) for r in rows]
            z = [flat[i * len(us):(i + 1) * len(us)] for i in range(len(vs))]
            view.update(u=us, v=vs, z=z, shown=columns[0] if columns else None,
                        zmin=min(flat, default=None), zmax=max(flat, default=None))
        out.append(view)
    return out


__all__ = ["csv_text", "raster_tasks", "raster_views"]
