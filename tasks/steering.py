"""The coordinator's side of run control and of the run timeline.

Why apart from the coordinator: pause and stop touch every phase of an iteration (the
boundary before dispatch, parked batches, re-sends, the final receipt), and the
timeline's times are taken at the same places; keeping that bookkeeping here leaves the
coordinator's loop as it was, with a call at each phase.

Pause and stop (``mainboard runs pause|stop`` set ``control`` in the run's state hash):
workers park batches they have not sampled yet (``p:<batch>`` on the done list), the
coordinator stops re-sending, waits for the batches in flight, and ends the run as
``paused`` (resumable: stored batch results of the cut iteration are kept in Redis, so the
resume computes only the rest and the numbers are those of an uninterrupted run) or
``stopped`` (with its partial result).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

import redis

from mainboard import keys
from mainboard.integrators.plain import to_plain
from mainboard.receipts import BatchResent, Payload, RunPaused, RunStopped
from mainboard.redact import redact_text
from mainboard.runs.logs import LogLine, append_logs, level_name
from mainboard.runs.spans import clock_offset, register_worker
from mainboard.tasks.outage import BROKER_ERRORS

COORDINATOR = "coordinator"
PROCESS_LOGGER = "mainboard.process"  # where the process client logs (integrators/process)


class Recorder(Protocol):
    """Where the coordinator's receipts go: a run store, or its ordered writer
    (``tasks.pipeline.ReceiptWriter``)."""

    def record(self, payload: Payload) -> Any:
        """Write (or queue) one receipt line."""


def shadow_name(stage: str, run_name: str, iteration: int, batch: int) -> str:
    """The name Flower and the worker logs show for one stage task of one batch."""
    return f"integrate.{stage}[run={run_name} it={iteration} b={batch}]"


class Halt(Exception):  # noqa: N818 - a control-flow signal, not an error
    """The run pauses or stops at this batch boundary (``stored`` batches of the iteration
    in hand are kept)."""

    def __init__(self, control: str, stored: int) -> None:
        super().__init__(control)
        self.control, self.stored = control, stored
        self.status = "paused" if control == "pause" else "stopped"


class Steering:
    """Control requests, parked batches and phase times of one coordinator's run."""

    def __init__(self, r: redis.Redis, store: Recorder, run_id: str) -> None:
        self.r, self.store, self.run_id = r, store, run_id
        self.halting: str | None = None
        self.parked: set[int] = set()
        self.batches = 0
        self._times: dict[str, float] = {}
        self._offset: float | None = None
        self.host = socket.gethostname()
        self.stale_said = 0  # stale result writes already told in the run's log

    def stale(self, gen: int, count: int | None = None) -> int:
        """Result writes of older owner generations refused so far (``stale_refused`` of the
        run's state, read here unless the caller read it as ``count``); each new one is
        said once in the run's log."""
        if count is None:
            count = int(self.r.hget(keys.run_state(self.run_id), "stale_refused") or 0)
        if count > self.stale_said:
            self.log("warn", f"{count - self.stale_said} result write(s) sent by an earlier "
                     f"coordinator of this run refused, not merged (owner generation now {gen})")
            self.stale_said = count
        return count

    def begin(self, batches: int) -> None:
        """A new iteration of ``batches`` batches (the first registers the coordinator's
        host and clock offset beside the workers', for the trace)."""
        self.parked, self.batches, self._times = set(), batches, {}
        if self._offset is None:
            with contextlib.suppress(*BROKER_ERRORS):
                self._offset = clock_offset(self.r)
                register_worker(self.r, self.run_id, COORDINATOR, {
                    "host": self.host, "kind": COORDINATOR, "pid": os.getpid(), "job_id": "",
                    "offset": self._offset})

    def mark(self, phase: str, at: float | None = None) -> None:
        """The time ``phase`` (dispatch, complete, adapt) first happened this iteration
        (``at``: when it did, for batches sent before the iteration began here)."""
        self._times.setdefault(phase, time.time() if at is None else at)

    def times(self) -> dict[str, float]:
        """The phase times of the iteration in hand (for its receipt line)."""
        return dict(self._times)

    def poll(self) -> None:
        """Read a pause or stop request (once seen, it holds for the rest of this run)."""
        if not self.halting:
            self.seen(self.r.hget(keys.run_state(self.run_id), "control"))

    def seen(self, raw: bytes | None) -> None:
        """The run state's ``control`` as read (by :meth:`poll` or in a caller's pipeline)."""
        if self.halting:
            return
        control = raw.decode() if raw else None
        if control in keys.RUN_CONTROLS:
            self.halting = control
            self.log("info", f"{control} requested: no new batch is sampled; waiting for "
                             "the batches in flight")

    def boundary(self, read: bool = True) -> None:
        """Between iterations: halt now when asked to (``read=False``: the request was read
        just before, with the iteration's record)."""
        if read:
            self.poll()
        if self.halting:
            raise Halt(self.halting, 0)

    def resent(self, iteration: int, batch: int, attempt: int, reason: str) -> None:
        """A batch goes out again: a receipt line (timeline) and a log line."""
        self.store.record(BatchResent(run_id=self.run_id, iteration=iteration, batch=batch,
                                      attempt=attempt, reason=reason))
        self.log("warn", f"batch re-sent as attempt {attempt}: {reason}", iteration, batch)

    def halted(self, halt: Halt, iteration: int, result: Any) -> None:
        """Record the pause or stop (receipt, state hash, log line)."""
        if halt.status == "paused":
            self.store.record(RunPaused(run_id=self.run_id, iteration=iteration,
                                        stored=halt.stored))
        else:
            self.store.record(RunStopped(run_id=self.run_id, iteration=iteration,
                                         result=to_plain(result.to_dict())))
        with contextlib.suppress(*BROKER_ERRORS):
            with self.r.pipeline(transaction=True) as pipe:
                pipe.hset(keys.run_state(self.run_id), mapping={"status": halt.status,
                                                                "updated": time.time()})
                pipe.hdel(keys.run_state(self.run_id), "control")
                pipe.execute()
        self.log("info", f"run {halt.status} after iteration {iteration}"
                 + (f" ({halt.stored} batches of the next one kept)" if halt.stored else ""))

    def log(self, level: str, message: str, iteration: int | None = None,
            batch: int | None = None, source: str = COORDINATOR) -> None:
        """A line in the run's log from the coordinator, or relayed by it from a process it
        runs (``source``); lost quietly if the broker is away."""
        with contextlib.suppress(*BROKER_ERRORS):
            if self._offset is None:
                self._offset = clock_offset(self.r)
            append_logs(self.r, self.run_id, [LogLine(
                time.time() + self._offset, level, COORDINATOR, self.host, message,
                iteration, batch, source=source)])


class ProcessLines(logging.Filter):
    """Relays what this run's coordinator-side processes say (a process sampler, the
    evaluator it asks for metadata) into the run's log: ``process`` for their own lines,
    ``coordinator`` for mainboard's lines about them (started, restarted).

    A filter on the process logger, not a handler: a handler would stop Python's last-resort
    printing of warnings on the CLI's stderr."""

    def __init__(self, steer: Steering) -> None:
        super().__init__()
        self.steer = steer

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "process_run", None) == self.steer.run_id:
            source = "process" if getattr(record, "process_role", None) else COORDINATOR
            self.steer.log(level_name(record.levelno), redact_text(record.getMessage()),
                           source=source)
        return True


_relay_lock = threading.Lock()
_level_before: list[int] = []  # the process logger's level before the first relay


@contextlib.contextmanager
def relay_process_lines(steer: Steering) -> Iterator[None]:
    """While a run's processes live here, their info lines and up reach its log (the
    process logger is opened to INFO, as on workers, then closed again by the last relay)."""
    logger, relay = logging.getLogger(PROCESS_LOGGER), ProcessLines(steer)
    with _relay_lock:
        if not any(isinstance(f, ProcessLines) for f in logger.filters):
            _level_before[:] = [logger.level]
            if logger.getEffectiveLevel() > logging.INFO:
                logger.setLevel(logging.INFO)
        logger.addFilter(relay)
    try:
        yield
    finally:
        with _relay_lock:
            logger.removeFilter(relay)
            if not any(isinstance(f, ProcessLines) for f in logger.filters) and _level_before:
                logger.setLevel(_level_before.pop())


__all__ = ["COORDINATOR", "Halt", "ProcessLines", "Recorder", "Steering", "relay_process_lines",
           "shadow_name"]
