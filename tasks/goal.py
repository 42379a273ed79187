"""The coordinator's half of a run's forecast: how far the error is from its target, and
how fast the run draws samples, published in the run's ``forecast`` hash after each
iteration (``keys.run_forecast``, field ``run``).

Why the coordinator: it alone knows the combined error after each iteration and the wall
time the run really takes per sample (dispatch, workers, merge, adapt). The fleet keeper
(:mod:`mainboard.fleet.goal`) reads this, splits the rate over the pools' allocations from
the run's spans, prices it and sizes the pools; ``runs show`` and the dashboard show both.
The deadline is resolved once, when the run is created, and kept in its ``run.created``
receipt as an absolute UTC time; a resumed run keeps it.
"""

from __future__ import annotations

import json
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

import redis

from mainboard import keys
from mainboard.errors import UserError
from mainboard.integrators.goal import (
    error_ratio,
    halving_samples,
    resolve_deadline,
    samples_to_target,
)
from mainboard.integrators.spec import RunSpec
from mainboard.runs.store import RunStore
from mainboard.tasks import BATCH_QUEUE

WINDOW = 3  # iterations the rate is measured over (the newest, so it follows the fleet)
TTL_S = 7 * 86400


def start_deadline(spec: RunSpec, file: str | None = None,
                   now: datetime | None = None) -> str | None:
    """``[stop] deadline`` as an absolute UTC time (ISO 8601), resolved now, at run start;
    a deadline in the past is bad input (one line, nothing started)."""
    text = spec.stop.deadline
    if text is None:
        return None
    try:
        at = resolve_deadline(text, now or datetime.now(UTC))
    except ValueError as exc:
        raise UserError(f"{file or 'run file'}: stop.deadline: {exc}; valid: a duration or a "
                        "time of day still to come") from None
    return at.isoformat()


def deadline_epoch(iso: str | None) -> float | None:
    """The stored deadline as unix seconds."""
    return datetime.fromisoformat(iso).timestamp() if iso else None


class Forecaster:
    """Measures one run's error and rate per iteration; publishes the run part."""

    def __init__(self, r: redis.Redis, run_id: str, spec: RunSpec,
                 deadline: float | None) -> None:
        self.r, self.run_id, self.stop, self.deadline = r, run_id, spec.stop, deadline
        self.marks: deque[tuple[float, int]] = deque(maxlen=WINDOW + 1)

    @classmethod
    def of(cls, r: redis.Redis, store: RunStore, run_id: str, spec: RunSpec
           ) -> Forecaster | None:
        """For a run with an error target (the only kind a forecast means something for)."""
        if spec.stop.relative_error is None and spec.stop.absolute_error is None:
            return None
        deadline = None
        if spec.stop.deadline is not None:
            history = store.history(run_id)
            deadline = deadline_epoch(history.created.deadline if history else None)
        return cls(r, run_id, spec, deadline)

    def begin(self, iteration: int, samples: int) -> None:
        """Published before the first batch goes out, so the keeper sizes the run's pools
        for its goal from the start (one allocation until it is measured). The rate is
        measured from the end of this coordinator's first iteration on: the first one
        waits for workers to boot (a pool at zero), which later ones do not."""
        self.marks.clear()
        self._write(self._doc(iteration, samples) | {"samples_to_target": None})

    def _doc(self, iteration: int, samples: int) -> dict[str, Any]:
        return {"iteration": iteration, "samples": samples, "deadline": self.deadline,
                "budget_usd": self.stop.budget_usd,
                "budget_core_hours": self.stop.budget_core_hours, "goal": self.stop.goal,
                "queue": BATCH_QUEUE, "status": "running", "updated": time.time()}

    def after(self, iteration: int, samples: int, used: int, result: dict[str, Any]
              ) -> dict[str, Any] | None:
        """Publish the forecast after ``iteration``: ``samples`` drawn in all, ``used`` of
        them in the estimate; None while there is no error to forecast from."""
        now = time.time()
        self.marks.append((now, samples))
        ratio = error_ratio(self.stop, result.get("estimate"), result.get("error"))
        if ratio is None or used <= 0:
            return None
        (t0, s0), (t1, s1) = self.marks[0], self.marks[-1]
        rate = (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None
        todo = samples_to_target(used, ratio)
        doc = self._doc(iteration, samples) | {
            "samples_used": used, "error_ratio": ratio, "samples_to_target": todo,
            "samples_per_s": rate, "window": [t0, t1],
            "time_to_target_s": todo / rate if rate else None,
            "halving_samples": halving_samples(used)}
        self._write(doc)
        return doc

    def ended(self, reason: str | None) -> None:
        """The run ended: ``met`` when its error target was, so the keeper releases its
        allocations now; else ``ended``."""
        raw = self.r.hget(keys.run_forecast(self.run_id), "run")
        doc = json.loads(raw) if raw else {"goal": self.stop.goal, "queue": BATCH_QUEUE}
        met = reason in ("relative_error", "absolute_error")
        doc.update(status="met" if met else "ended", updated=time.time(),
                   **({"samples_to_target": 0, "time_to_target_s": 0.0} if met else {}))
        self._write(doc)

    def _write(self, doc: dict[str, Any]) -> None:
        key = keys.run_forecast(self.run_id)
        with self.r.pipeline(transaction=False) as pipe:
            pipe.hset(key, "run", json.dumps(doc))
            pipe.expire(key, TTL_S)
            pipe.execute()


__all__ = ["Forecaster", "deadline_epoch", "start_deadline"]
