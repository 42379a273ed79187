"""A task's time need against its worker's time left: never start what cannot finish here.

A message may carry ``time_request`` (seconds) in its headers: a caller sets it
(``task.apply_async(args, headers={"time_request": 600})`` from any pipeline), a run file's
``[batching] time_request`` does, and otherwise a run's coordinator sends its measured task
time. A fleet worker knows when its allocation ends (SLURM: ``squeue -o %e``, read by the
retire clock of :mod:`mainboard.tasks.fleet`; other hosts: the job script's start stamp plus
the walltime; no walltime: no end, every task starts). Every task of the app goes through
:func:`strategy`, which runs in the worker's consumer before the message reaches the pool:
when the need is larger than the time left, the message is held ``HOLD_S`` (with prefetch 1
this worker takes nothing else meanwhile, so another worker takes the next message), then
rejected with requeue: kombu moves it from the worker's unacked set back to the far end of
its queue in one Redis transaction.

Why this design, and not a worker that stops consuming its queues: the task never starts on
the short-lived worker (nothing runs twice, nothing is cut at walltime), the message never
leaves the broker's keeping (unacked until it is back in the queue; a worker that dies
meanwhile leaves it to the visibility timeout and the run's own re-send), and the worker
keeps taking every task that fits (no need, or a smaller one) until it retires.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from celery import Task
from celery.worker.strategy import default

HEADER = "time_request"
HOLD_S = 1.0  # how long a refused message stays with this worker before it goes back
TOLD_MAX = 1000  # refused task ids remembered, so each is logged once
log = logging.getLogger("mainboard.fleet")

_end: list[float] = []  # when this worker's allocation ends (epoch s), once known


def set_end(end: float | None) -> None:
    """Record this worker's allocation end (None: no end known); the retire clock calls it."""
    _end[:] = [] if end is None else [float(end)]


def time_left(now: float | None = None) -> float | None:
    """Seconds until this worker's allocation ends; None when no end is known."""
    if not _end:
        return None
    return _end[0] - (time.time() if now is None else now)


def need_of(headers: Mapping[str, Any] | None) -> float | None:
    """The ``time_request`` a message declares (seconds), or None (no need, or not a number)."""
    raw = (headers or {}).get(HEADER)
    try:
        need = float(raw) if raw is not None and not isinstance(raw, bool) else None
    except (TypeError, ValueError):
        return None
    return need if need is not None and math.isfinite(need) and need > 0 else None


def refuses(need: float | None, left: float | None) -> bool:
    """A task needing ``need`` s must not start with ``left`` s of allocation to go."""
    return need is not None and left is not None and need > left


def strategy(task: Task, app: Any, consumer: Any, **kwargs: Any) -> Callable[..., Any]:
    """Celery's default strategy, behind the time-need check (``Task.Strategy``)."""
    handle = default(task, app, consumer, **kwargs)
    told: dict[str, None] = {}  # task ids refused already, oldest first

    def on_message(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any,
                   **more: Any) -> Any:
        need, left = need_of(getattr(message, "headers", None)), time_left()
        if not refuses(need, left):
            return handle(message, body, ack, reject, callbacks, **more)
        task_id = str((message.headers or {}).get("id", "?"))
        if task_id not in told:  # once per task: it may come back here many times
            told[task_id] = None
            while len(told) > TOLD_MAX:
                told.pop(next(iter(told)))
            log.info("not starting %s %s here: it needs %.0f s, this allocation ends in "
                     "%.0f s; back to its queue for another worker", task.name, task_id,
                     need, left)
        consumer.timer.call_after(HOLD_S, reject, (log, consumer.connection_errors, True))
        return None

    return on_message


class TimedTask(Task):
    """The app's task base (``Celery(task_cls=...)``): every task goes through
    :func:`strategy`, ours and a pipeline's own alike."""

    Strategy = f"{__name__}:strategy"


__all__ = ["HEADER", "TimedTask", "need_of", "refuses", "set_end", "strategy", "time_left"]
