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

A task no worker can ever start (its need exceeds every pool's walltime) would go round for
ever, so every put-back is counted in Redis (``keys.time_need``: the first put-back, how
many, each refusing pool's walltime). Once it has waited ``time_request_wait`` seconds (a
header; else ``$MAINBOARD_TIME_NEED_WAIT_S``, default ``DEFAULT_WAIT_S``) from its first
put-back, or was put back ``$MAINBOARD_TIME_NEED_PUTBACKS`` times, the worker that holds it
starts it as a failure: :meth:`TimedTask.before_start` raises :class:`TimeNeedUnmet` with one
line naming its need and the walltimes seen (a run's stage records it as the batch's error,
so the run fails with that line in ``runs show`` and ``runs logs``).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
from celery import Task
from celery.worker.strategy import default

from mainboard import keys
from mainboard.errors import TimeNeedUnmet
from mainboard.tasks import POOL_ENV, WALLTIME_ENV, broker_url_of
from mainboard.tasks.context import client

HEADER = "time_request"
WAIT_HEADER = "time_request_wait"  # seconds a refused task may wait from its first put-back
UNMET = "mainboard_time_unmet"  # set on a message given up: the line it fails with
WAIT_ENV = "MAINBOARD_TIME_NEED_WAIT_S"
PUTBACKS_ENV = "MAINBOARD_TIME_NEED_PUTBACKS"  # unset: no bound on the count
DEFAULT_WAIT_S = 600.0  # long enough for a pool with room to come up (queue wait, boot)
KEEP_S = 86400  # the put-back record of a task outlives it a day
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


@dataclass(frozen=True)
class PutBacks:
    """A refused task's record across every worker: when first put back, how often, and
    the walltime (seconds, "" when unknown) of each pool that refused it."""

    first: float
    count: int
    walls: dict[str, str] = field(default_factory=dict)


def _number(raw: object) -> float | None:
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def bounds(headers: Mapping[str, Any] | None,
           env: Mapping[str, str] = os.environ) -> tuple[float, int | None]:
    """(seconds from the first put-back, put-backs) after which a refused task fails: the
    message's ``time_request_wait``, else the worker's environment, else the default."""
    wait = _number((headers or {}).get(WAIT_HEADER))
    if wait is None:
        wait = _number(env.get(WAIT_ENV))
    count = _number(env.get(PUTBACKS_ENV))
    return (DEFAULT_WAIT_S if wait is None else wait,
            None if count is None or count < 1 else int(count))


def given_up(seen: PutBacks, now: float, wait_s: float, most: int | None) -> bool:
    """The task has waited long enough, or been put back often enough."""
    return now - seen.first >= wait_s or (most is not None and seen.count >= most)


def unmet_line(name: str, task_id: str, need: float, seen: PutBacks, now: float) -> str:
    """The one line a given-up task fails with: its need, the walltimes it met, the fix."""
    walls = ", ".join(f"pool {p}: walltime {w} s" if w else f"pool {p}: no walltime known"
                      for p, w in sorted(seen.walls.items())) or "no worker recorded"
    return (f"{name} {task_id} not run: it needs {need:.0f} s (time_request) and no worker "
            f"had that long ({walls}); put back {seen.count} time(s) over "
            f"{max(0.0, now - seen.first):.0f} s; valid: a pool whose walltime exceeds "
            f"{need:.0f} s plus its retire_before, or a smaller time_request")


def record_put_back(r: redis.Redis, task_id: str, pool: str, walltime: str,
                    now: float) -> PutBacks:
    """Count one put-back of ``task_id`` (one round trip); the record so far."""
    key = keys.time_need(task_id)
    with r.pipeline(transaction=True) as pipe:
        pipe.hsetnx(key, "first", repr(now))
        pipe.hincrby(key, "count", 1)
        pipe.hset(key, f"pool:{pool}", walltime)
        pipe.expire(key, KEEP_S)
        pipe.hgetall(key)
        got = {k.decode(): v.decode() for k, v in pipe.execute()[-1].items()}
    return PutBacks(float(got.get("first", now)), int(got.get("count", 1)),
                    {k[5:]: v for k, v in got.items() if k.startswith("pool:")})


def _here(consumer: Any) -> str:
    """This worker's pool (else its host, else its node name), as put-back records name it."""
    return (os.environ.get(POOL_ENV) or os.environ.get("MAINBOARD_FLEET_HOST")
            or str(getattr(consumer, "hostname", "") or "?"))


def unmet(request: Any) -> str | None:
    """The line a task given up for its time need fails with (None: it may run)."""
    line = getattr(request, UNMET, None)
    return str(line) if line else None


def check(request: Any) -> None:
    """Raise :class:`TimeNeedUnmet` for a task that was given up."""
    line = unmet(request)
    if line is not None:
        raise TimeNeedUnmet(line)


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
        line = _give_up(app, consumer, task.name, task_id, need, message.headers)
        if line is not None:  # it runs here as a failure with that line, acked as usual
            log.warning("%s", line)
            message.headers[UNMET] = line
            return handle(message, body, ack, reject, callbacks, **more)
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


def _give_up(app: Any, consumer: Any, name: str, task_id: str, need: float,
             headers: Mapping[str, Any] | None) -> str | None:
    """Count this put-back; the failure line once the task's wait is over (None: put it
    back; so too when Redis cannot be asked: nothing is given up on a guess)."""
    now = time.time()
    try:
        seen = record_put_back(client(broker_url_of(app.conf)), task_id, _here(consumer),
                               os.environ.get(WALLTIME_ENV, ""), now)
    except (redis.RedisError, ValueError) as exc:
        log.debug("put-back of %s not counted: %s", task_id, exc)
        return None
    if not given_up(seen, now, *bounds(headers)):
        return None
    return unmet_line(name, task_id, need, seen, now)


class TimedTask(Task):
    """The app's task base (``Celery(task_cls=...)``): every task goes through
    :func:`strategy`, ours and a pipeline's own alike."""

    Strategy = f"{__name__}:strategy"
    checks_time_need = False  # True: the task calls `check` itself (a run's stages)

    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        """A task given up for its time need fails here, before it does anything."""
        if not self.checks_time_need:
            check(self.request)


__all__ = ["HEADER", "WAIT_HEADER", "PutBacks", "TimedTask", "bounds", "check",
           "given_up", "need_of", "record_put_back", "refuses", "set_end", "strategy",
           "time_left", "unmet_line"]
