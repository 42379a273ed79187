"""Riding out a broker outage: a restart, a failover or a network blip must not end a run.

The coordinator's Redis calls and Celery publishes raise one of ``BROKER_ERRORS`` when
the broker goes away. :class:`Outage` then logs one line, pings with backoff (0.5 s
doubling to 5 s) until the broker answers or the budget is spent, logs one line when it is
back, and lets the caller redo its step. What was in flight is re-sent by the caller and
merged exactly once (results are stored set-if-absent), so the run ends with the numbers
an undisturbed run gives. Past the budget it raises :class:`~mainboard.errors.BrokerLost`
(exit code 3) naming the broker and the command that resumes the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import redis
from kombu.exceptions import BatchPublishError, OperationalError

from mainboard.errors import BrokerLost, BrokerRestarted
from mainboard.services.broker import address as where  # host:port for messages

REDIS_DOWN: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
# BatchPublishError: a pipelined publish (tasks/dispatch) cut by the outage; what it held is
# re-sent with the step and stored set-if-absent, so "delivery is uncertain" costs nothing
BROKER_ERRORS: tuple[type[BaseException], ...] = (
    *REDIS_DOWN, OperationalError, BatchPublishError, ConnectionError, BrokerRestarted)
DEFAULT_BUDGET_S = 300.0
FIRST_WAIT_S = 0.5
MAX_WAIT_S = 5.0
T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass
class Outage:
    """Retries a step across broker outages within ``budget_s`` seconds per outage."""

    r: redis.Redis
    broker: str  # host:port
    run_id: str
    budget_s: float = DEFAULT_BUDGET_S
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    count: int = 0  # outages ridden out so far: a step redone after one re-publishes first
    server: str | None = None  # run_id of the Redis server last seen
    note: Callable[[str, str], None] | None = None  # (level, line) into the run's own log

    def check(self) -> None:
        """Raise BrokerRestarted when the server is not the one seen before (cheap: INFO)."""
        current = str(self.r.info("server").get("run_id", ""))
        if self.server is not None and current != self.server:
            self.server = current
            raise BrokerRestarted(f"the broker at {self.broker} restarted")
        self.server = current

    def run(self, step: Callable[[], T]) -> T:
        """``step()``, redone after each outage until it completes (or the budget is spent)."""
        while True:
            try:
                return step()
            except BROKER_ERRORS as exc:
                self.wait(exc)

    def wait(self, cause: BaseException) -> None:
        """Block until the broker answers PING again; BrokerLost past the budget."""
        began = self.clock()
        log.warning("run %s: the broker at %s went away (%s); retrying for up to %.0f s",
                    self.run_id, self.broker, type(cause).__name__, self.budget_s)
        delay = FIRST_WAIT_S
        while True:
            try:
                self.r.ping()
                self.server = str(self.r.info("server").get("run_id", ""))
                break
            except BROKER_ERRORS:
                if self.clock() - began + delay > self.budget_s:
                    raise BrokerLost(
                        f"run {self.run_id}: the broker at {self.broker} is unreachable "
                        f"(for {self.clock() - began:.0f} s, budget {self.budget_s:.0f} s); "
                        f"nothing is lost: start it again, then `mainboard runs resume "
                        f"{self.run_id}`") from None
                self.sleep(delay)
                delay = min(delay * 2, MAX_WAIT_S)
        self.count += 1
        log.warning("run %s: the broker at %s is back after %.1f s; re-sending what was in "
                    "flight", self.run_id, self.broker, self.clock() - began)
        if self.note is not None:  # said once it is back: the run's log lives in that broker
            self.note("warn", f"the broker at {self.broker} went away "
                      f"({type(cause).__name__}) and was back after "
                      f"{self.clock() - began:.1f} s; re-sent what was in flight")


__all__ = ["BROKER_ERRORS", "REDIS_DOWN", "DEFAULT_BUDGET_S", "Outage", "where"]
