"""``mainboard.tasks.integrate``: a whole integration as one Celery task, for pipelines.

Call it from any process that sees the mainboard.toml::

    import mainboard.tasks
    result = mainboard.tasks.integrate.delay(run_dict).get()   # RunResult.to_dict()

A parent file's dict (scan, tune, campaign) gives the parent's table instead. The task
calls ``mainboard.tasks.runner.integrate``, the one way into a run, so the fleet's hosts are
synced first as for ``mainboard integrate``.

The task is routed to the ``mainboard.coordinator`` queue so a coordinator, which waits
for a whole run, never takes the slot of a batch worker. Serve that queue with::
    celery -A mainboard.tasks.app worker -Q mainboard.coordinator --concurrency=2

The coordinator inside the task uses the batch workers that are up (the fleet), or starts
local ones when there are none. Runs are content-addressed: a redelivered task (its
coordinator worker died) resumes from the last snapshot, and a run that already finished
returns its stored result without integrating again. This module forwards attribute access to the task object
(PEP 562), so ``mainboard.tasks.integrate.delay``/``.apply_async``/``.s`` are the task's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import Task, shared_task

from mainboard.tasks import INTEGRATE_TASK, broker_url_of
from mainboard.tasks.app import get_app
from mainboard.tasks.routing import CoordinatorTask


@shared_task(name=INTEGRATE_TASK, bind=True, base=CoordinatorTask, acks_late=True,
             reject_on_worker_lost=True)
def integrate_task(self: Task, run: Mapping[str, Any], workers: int | None = None,
                   resume: bool = True) -> dict[str, Any]:
    """Integrate ``run`` (a run or parent file's dict): the one way into a run, as
    ``mainboard.integrate``; a redelivered task resumes from the last snapshot."""
    # lazy: start-up time, every worker imports this task module; the runner only when a
    # coordinator runs here
    from mainboard.tasks.runner import integrate

    result = integrate(dict(run), workers=workers, broker_url=broker_url_of(self.app.conf),
                       resume=resume)
    return result if isinstance(result, dict) else result.to_dict()


def __getattr__(name: str) -> Any:
    """Forward ``delay``, ``apply_async``, ``s`` ... to the task bound to the process-wide app."""
    if name.startswith("__"):
        raise AttributeError(name)

    return getattr(get_app().tasks[INTEGRATE_TASK], name)


__all__ = ["integrate_task"]
