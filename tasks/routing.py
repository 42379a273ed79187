"""Which queue a mainboard task goes to when the caller does not say.

Celery deprecates the ``queue`` task attribute in favour of ``task_routes``; a base class
that fills in the queue at send time keeps ``task.delay(...)`` routed correctly in any
app, including one that a user configured without our routes. An explicit ``queue=``
option or the app's ``task_routes`` still win.
"""

from __future__ import annotations

from typing import Any, ClassVar

from mainboard.tasks import BATCH_QUEUE, COORDINATOR_QUEUE
from mainboard.tasks.timeneed import TimedTask


class QueueTask(TimedTask):
    """Sends to ``default_queue`` unless a ``queue`` option or ``task_routes`` decide (and,
    as every task of ours, is not started where its time need does not fit)."""

    default_queue: ClassVar[str] = BATCH_QUEUE

    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: str | None = None,
                    producer: Any = None, link: Any = None, link_error: Any = None,
                    shadow: str | None = None, **options: Any) -> Any:
        """Celery's apply_async with our queue as the default destination."""
        if "queue" not in options and not self.app.conf.task_routes:
            options["queue"] = self.default_queue
        return super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow,
                                   **options)


class BatchTask(QueueTask):
    """Per-batch stage tasks: the batch queue (a time need given up is checked inside the
    stage, so the run's coordinator learns it as the batch's error)."""

    default_queue = BATCH_QUEUE
    checks_time_need = True


class CoordinatorTask(QueueTask):
    """Whole-run tasks: the coordinator queue, so they never hold a batch worker's slot."""

    default_queue = COORDINATOR_QUEUE


__all__ = ["BatchTask", "CoordinatorTask", "QueueTask"]
