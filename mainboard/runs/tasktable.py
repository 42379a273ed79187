"""A run's task table from its receipts: ``runs tasks`` and the dashboard's task views.

Why in the runs room and not beside the task runner: the table is read where no Celery
may be imported (the dashboard, the CLI's listing); the runner (``tasks/tasklist.py``)
uses the same timeline and done receipts.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from mainboard.integrators.spec import RunSpec, parse_run
from mainboard.integrators.spec_tasks import Step, TaskSpec
from mainboard.receipts import TaskDone, TaskStarted
from mainboard.runs.store import RunHistory, spec_of

_TASKS = TypeAdapter(list[TaskSpec])


def steps_of(spec: RunSpec, appended: list[dict[str, Any]]) -> list[Step]:
    """The run's timeline: its own tasks, then those ``runs append`` added."""
    steps = spec.task_steps()
    if appended:
        steps = spec.task_steps(steps, _TASKS.validate_python(appended))
    return steps


def done_tasks(history: RunHistory | None) -> dict[int, TaskDone]:
    """Task index -> its done receipt."""
    if history is None:
        return {}
    return {t.index: t for t in history.tasks if isinstance(t, TaskDone)}


def task_rows(history: RunHistory) -> list[dict[str, Any]]:
    """Every task of a run with its state (pending, running, done, failed, skipped), samples
    and estimate +- error: ``runs tasks``, from receipts only."""
    spec = parse_run(dict(spec_of(history)))
    steps = steps_of(spec, history.appended)
    done = done_tasks(history)
    started = {t.index for t in history.tasks if isinstance(t, TaskStarted)}
    ended = {"failed": "failed", "stopped": "skipped"}.get(history.status)
    rows = []
    for step in steps:
        task = done.get(step.index)
        row: dict[str, Any] = {
            "index": step.index, "name": step.name, "kind": step.kind,
            "from": steps[step.parent].name if step.parent is not None else None,
            "frozen": bool(step.settings.get("frozen")) if step.kind == "sample" else None,
            "samples": 0, "estimate": None, "error": None}
        if task is not None:
            row.update(state="done", samples=task.samples, estimate=task.estimate,
                       error=task.error)
            if task.values is not None:
                row["points"] = len(task.values.get("t") or task.values.get("u") or [])
        elif step.index in started:
            row["state"] = ended or "running"
            last = [i for i in history.iterations if i.snapshot.get("task") == step.name]
            if last:
                row.update(samples=last[-1].samples, estimate=last[-1].estimate,
                           error=last[-1].error)
        else:
            row["state"] = "skipped" if ended else "pending"
        rows.append(row)
    return rows


__all__ = ["done_tasks", "steps_of", "task_rows"]
