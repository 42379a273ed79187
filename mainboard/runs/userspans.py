"""``mainboard.span("name", **attrs)``: user code's own spans on the run's or job's timeline.

Why a sink set from outside: this module must stay importable anywhere (a job's script, an
integrand on a worker) without Redis or Celery. A batch worker's telemetry installs its sink
(the span joins the run's span stream, shipped in the background, on the broker clock); a
job's process has ``$MAINBOARD_JOB_DIR`` and appends one line per span to ``spans.ndjson``
there, read by ``mainboard trace merge``; anywhere else a span is a no-op: one global and
one environment look-up on enter, nothing on exit.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from contextlib import ContextDecorator
from typing import Any

JOB_DIR_ENV = "MAINBOARD_JOB_DIR"
JOB_SPANS = "spans.ndjson"  # in the job's directory: one JSON object per line
USER_PREFIX = "user:"  # a user span's stage in a run's span stream
Sink = Callable[[str, float, float, Mapping[str, Any]], None]
_sink: Sink | None = None


def set_sink(sink: Sink | None) -> None:
    """Where spans of this process go (a batch worker's telemetry sets it once)."""
    global _sink
    _sink = sink


def job_sink(name: str, start: float, duration: float, attrs: Mapping[str, Any]) -> None:
    """Append one span to the job's ``spans.ndjson`` (one short O_APPEND write: lines of
    several processes of the job do not interleave)."""
    line = json.dumps({"name": name, "t": start, "d": duration, "pid": os.getpid(),
                       "host": socket.gethostname(), "args": dict(attrs)}, default=str)
    path = os.path.join(os.environ[JOB_DIR_ENV], JOB_SPANS)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class UserSpan(ContextDecorator):
    """One span of user code: ``with mainboard.span("load", file=f):`` or as a decorator
    ``@mainboard.span("step")`` (each call its own span)."""

    __slots__ = ("_clock", "_sink", "_start", "attrs", "name")

    def __init__(self, name: str, attrs: Mapping[str, Any]) -> None:
        self.name, self.attrs = str(name), dict(attrs)
        self._sink: Sink | None = None
        self._start = self._clock = 0.0

    def _recreate_cm(self) -> UserSpan:
        return UserSpan(self.name, self.attrs)  # a decorated function may recurse or thread

    def __enter__(self) -> UserSpan:
        self._sink = _sink or (job_sink if os.environ.get(JOB_DIR_ENV) else None)
        if self._sink is not None:
            self._start, self._clock = time.time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sink is not None:
            try:
                self._sink(self.name, self._start, time.perf_counter() - self._clock, self.attrs)
            except OSError:  # a full or vanished job dir must not fail the user's code
                pass


def span(name: str, **attrs: Any) -> UserSpan:
    """A span named ``name`` with ``attrs`` (shown as its args in Perfetto)."""
    return UserSpan(name, attrs)


__all__ = ["JOB_DIR_ENV", "JOB_SPANS", "USER_PREFIX", "UserSpan", "job_sink", "set_sink", "span"]
