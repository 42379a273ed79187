"""What a batch worker tells about a run: its log lines and a span per stage, via Redis.

Why a background thread: a stage must not wait on the network to say it ran. The hot path
appends one tuple to a deque (``span``); a flusher thread per worker process ships spans
and log lines every ``FLUSH_S`` in one pipeline (``mainboard.runs.logs`` and
``mainboard.runs.spans`` define the entries). Log lines come from Python logging: a handler
on the ``mainboard`` logger (stage errors, process stderr and ``@gblog`` lines, which the
process client logs at their level) tags each record with the batch in hand, so the pure
integrators never learn about runs or Redis.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import redis

from mainboard.config.hostkinds import HOST_KINDS
from mainboard.redact import redact_text
from mainboard.redisclient import redis_client
from mainboard.runs import userspans
from mainboard.runs.logs import LogLine, append_logs, level_name
from mainboard.runs.spans import Span, append_spans, clock_offset, register_worker

FLUSH_S = 0.2
BUFFER = 100_000  # lines or spans held while the broker is away; the oldest go first
HOST_ENV, JOB_ENV, KIND_ENV = "MAINBOARD_FLEET_HOST", "MAINBOARD_JOB_ID", "MAINBOARD_HOST_KIND"
_SpanRow = tuple[str, str, int, int, int, int, float, float, Mapping[str, Any] | None]
_NOT_ABOUT_RUNS = ("mainboard.fleet",)  # the worker's own heartbeat, not the batch in hand


def worker_kind(node: str) -> str:
    """A worker's host kind: ``$MAINBOARD_HOST_KIND``, else the first word of a fleet name
    (``slurm-hpc-12345@node07``), else ``local``."""
    env = os.environ.get(KIND_ENV)
    if env:
        return env
    first = node.partition("@")[0].partition("-")[0]
    return first if first in HOST_KINDS else "local"


class Shipper:
    """Buffers of one worker process and the thread that ships them."""

    def __init__(self, url: str, node: str) -> None:
        self.pid, self.node = os.getpid(), node
        self.r = redis_client(url, socket_timeout=10, socket_connect_timeout=5)
        self.host = os.environ.get(HOST_ENV) or socket.gethostname()
        self.spans: deque[_SpanRow] = deque(maxlen=BUFFER)
        self.lines: deque[tuple[str, LogLine]] = deque(maxlen=BUFFER)
        self.offset: float | None = None
        self.known: set[str] = set()
        self.current: tuple[str, int, int, str] | None = None  # run, iteration, batch, stage
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mainboard telemetry",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self.flush()

    def flush(self) -> None:
        """Ship what is buffered (a broker error keeps nothing: the next beat goes on)."""
        if not self.spans and not self.lines:
            return
        try:
            if self.offset is None:
                self.offset = clock_offset(self.r)
            spans: dict[str, list[Span]] = {}
            while self.spans:
                run, stage, it, b, n, a, t0, d, attrs = self.spans.popleft()
                spans.setdefault(run, []).append(
                    Span(stage, run, it, b, n, self.node, t0 + self.offset, d, a, attrs or {}))
            lines: dict[str, list[LogLine]] = {}
            while self.lines:
                run, line = self.lines.popleft()
                lines.setdefault(run, []).append(replace(line, ts=line.ts + self.offset))
            with self.r.pipeline(transaction=False) as pipe:
                for run in (set(spans) | set(lines)) - self.known:
                    register_worker(pipe, run, self.node, {
                        "host": self.host, "kind": worker_kind(self.node), "pid": self.pid,
                        "job_id": os.environ.get(JOB_ENV, ""), "offset": self.offset})
                for run, items in spans.items():
                    append_spans(pipe, run, items)
                for run, items in lines.items():
                    append_logs(pipe, run, items)
                pipe.execute()
            self.known |= set(spans) | set(lines)
        except (redis.RedisError, OSError):
            self.failed += 1

    def close(self) -> None:
        """Stop the thread after a last flush (worker process shutdown)."""
        self._stop.set()
        self.flush()


_shipper: Shipper | None = None
_lock = threading.Lock()


def shipper(url: str, node: str) -> Shipper:
    """This worker process's shipper (a fork gets its own), its log handler installed."""
    global _shipper
    current = _shipper
    if current is not None and current.pid == os.getpid():
        return current
    with _lock:
        if _shipper is None or _shipper.pid != os.getpid():
            _shipper = Shipper(url, node)
            _install_handler()
            userspans.set_sink(user_span)
            atexit.register(_shipper.close)
        return _shipper


def enter(url: str, node: str, run: str, iteration: int, batch: int, stage: str) -> Shipper:
    """A stage starts: later log lines of this process are about this batch."""
    ship = shipper(url, node)
    ship.current = (run, iteration, batch, stage)
    return ship


def span(ship: Shipper, stage: str, run: str, iteration: int, batch: int, n: int,
         attempt: int, start: float, duration: float) -> None:
    """Record one stage's span (the hot path: one deque append)."""
    ship.spans.append((run, stage, iteration, batch, n, attempt, start, duration, None))


def user_span(name: str, start: float, duration: float, attrs: Mapping[str, Any]) -> None:
    """``mainboard.span`` inside a stage (an integrand): into the run's span stream, tagged
    with the batch in hand, shipped with the stage spans (outside a stage: dropped)."""
    ship = _shipper
    if ship is None or ship.pid != os.getpid() or ship.current is None:
        return
    run, it, b, _stage = ship.current
    ship.spans.append((run, userspans.USER_PREFIX + name, it, b, 0, 0, start, duration,
                       attrs))


def source_of(record: logging.LogRecord) -> str:
    """``process`` for what an external process said (the process client tags those records
    with its role), ``worker`` for mainboard's own lines."""
    return "process" if getattr(record, "process_role", None) else "worker"


class RunLogHandler(logging.Handler):
    """Sends ``mainboard.*`` records of a worker process to the log of the run in hand."""

    def emit(self, record: logging.LogRecord) -> None:
        ship = _shipper
        if (ship is None or ship.pid != os.getpid() or ship.current is None
                or record.name.startswith(_NOT_ABOUT_RUNS)):
            return
        run, it, b, stage = ship.current
        try:
            text = redact_text(record.getMessage())
        except Exception:  # a bad format string must not break the task
            text = str(record.msg)
        ship.lines.append((run, LogLine(record.created, level_name(record.levelno), ship.node,
                                        ship.host, text, it, b, stage,
                                        source=source_of(record))))


_HANDLER = RunLogHandler()


def _install_handler() -> None:
    logger = logging.getLogger("mainboard")
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)


def shutdown(**_: Any) -> None:
    """Ship what is left (worker process shutdown)."""
    if _shipper is not None and _shipper.pid == os.getpid():
        _shipper.close()


def now() -> float:
    """The start time of a span (this host's clock; aligned when shipped)."""
    return time.time()


__all__ = ["RunLogHandler", "Shipper", "enter", "now", "shipper", "shutdown", "source_of", "span",
           "user_span", "worker_kind"]
