"""Logs of a run: every line a worker (or the coordinator) logged about it, kept in Redis.

Why a Redis stream per run: workers on any host already reach the broker, so their lines
come back without a log shipper; the stream is capped (``MAX_LINES``, the oldest go first)
and Redis counts every entry ever added, so what was dropped is known exactly. Times are
the workers' clocks corrected by the offset each measured against Redis ``TIME``, so lines
of several hosts merge in one order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import redis

from mainboard import keys
from mainboard.errors import UserError

MAX_LINES = 100_000
TRACE = 5
LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO,
          "warn": logging.WARNING, "error": logging.ERROR}
SOURCES = ("worker", "coordinator", "process", "keeper")
"""Who said it: mainboard's worker code, the run's coordinator, an external process's
own ``log()``/stderr (``@gblog`` lines, relayed by whichever side runs the process), or
the fleet keeper (a run's goal out of reach)."""
_NAMES = {TRACE: "trace", logging.DEBUG: "debug", logging.INFO: "info",
          logging.WARNING: "warn", logging.ERROR: "error", logging.CRITICAL: "error"}


def level_name(levelno: int) -> str:
    """The run-log name of a :mod:`logging` level (``warn``, not ``WARNING``)."""
    best = max((n for n in _NAMES if n <= levelno), default=TRACE)
    return _NAMES[best]


def level_number(name: str) -> int:
    """The number of a level name; UserError naming the valid ones otherwise."""
    try:
        return LEVELS[name.lower()]
    except KeyError:
        raise UserError(f"unknown log level {name!r}; valid: {', '.join(LEVELS)}") from None


def stream_id_order(entry_id: str) -> tuple[int, int]:
    """A stream id "ms-seq" as numbers: compared as strings "…-10" comes before "…-2"."""
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)


@dataclass(frozen=True)
class LogLine:
    """One line of a run's log (``iteration``/``batch`` when a batch was in hand;
    ``source`` one of :data:`SOURCES`)."""

    ts: float
    level: str
    worker: str
    host: str
    message: str
    iteration: int | None = None
    batch: int | None = None
    stage: str | None = None
    id: str = ""  # the stream entry id (a cursor for --follow)
    source: str = "worker"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the ``--json`` line)."""
        return asdict(self)

    def order(self) -> tuple[float, int, int]:
        """Time, then the stream id (the tie-break among lines of the same instant)."""
        return (self.ts, *stream_id_order(self.id))

    def to_fields(self) -> dict[str, str]:
        """The stream entry (strings; absent coordinates left out)."""
        out = {"ts": repr(self.ts), "level": self.level, "worker": self.worker,
               "host": self.host, "msg": self.message, "src": self.source}
        for name, value in (("it", self.iteration), ("b", self.batch), ("stage", self.stage)):
            if value is not None:
                out[name] = str(value)
        return out

    @classmethod
    def from_entry(cls, entry_id: bytes, fields: Mapping[bytes, bytes]) -> LogLine:
        """Inverse of :meth:`to_fields`."""
        def get(name: str) -> str | None:
            raw = fields.get(name.encode())
            return None if raw is None else raw.decode("utf-8", errors="replace")

        it, b, worker = get("it"), get("b"), get("worker") or "?"
        # a line written before sources were recorded: the coordinator signs with its name
        source = get("src") or ("coordinator" if worker == "coordinator" else "worker")
        return cls(float(get("ts") or 0.0), get("level") or "info", worker,
                   get("host") or "?", get("msg") or "", None if it is None else int(it),
                   None if b is None else int(b), get("stage"), entry_id.decode(), source)

    def text(self) -> str:
        """The human line: time, level, worker, source, where, message."""
        stamp = time.strftime("%H:%M:%S", time.localtime(self.ts)) + f".{int(self.ts % 1 * 1000):03d}"
        where = "" if self.iteration is None else f" it={self.iteration}" + (
            "" if self.batch is None else f" b={self.batch}")
        return (f"{stamp} {self.level.upper():5} {self.worker} [{self.source}]{where}: "
                f"{self.message}")


def append_logs(r: redis.Redis | Any, run_id: str, lines: Iterable[LogLine]) -> None:
    """Add lines to the run's log (``r`` may be a pipeline: the caller executes it)."""
    key = keys.run_logs(run_id)
    for line in lines:
        r.xadd(key, line.to_fields(), maxlen=MAX_LINES, approximate=True)


def log_counts(r: redis.Redis, run_id: str) -> tuple[int, int]:
    """(lines kept, lines dropped by the cap) of the run's log."""
    try:
        info = r.xinfo_stream(keys.run_logs(run_id))
    except redis.ResponseError:  # no such key: nothing logged yet
        return 0, 0
    kept = int(info["length"])
    added = int(info.get("entries-added", kept))
    return kept, max(0, added - kept)


def read_logs(r: redis.Redis, run_id: str, *, level: str | None = None,
              limit: int | None = None, upto: str = "+") -> list[LogLine]:
    """The run's log lines at ``level`` or above, merged in time order (the last ``limit``);
    only entries up to the stream id ``upto`` (where a follow then starts: no line twice)."""
    floor = level_number(level) if level else 0
    key = keys.run_logs(run_id)  # the newest ``limit`` entries suffice when nothing is filtered
    raw = (r.xrevrange(key, max=upto, count=limit) if limit and not floor
           else r.xrange(key, max=upto))
    lines = [LogLine.from_entry(i, f) for i, f in raw]
    lines = [x for x in lines if LEVELS.get(x.level, logging.INFO) >= floor]
    lines.sort(key=LogLine.order)
    return lines[-limit:] if limit else lines


def last_id(r: redis.Redis, run_id: str) -> str:
    """The id of the newest entry ("0-0" for an empty log): where a follow starts."""
    newest = r.xrevrange(keys.run_logs(run_id), count=1)
    return newest[0][0].decode() if newest else "0-0"


def follow_logs(r: redis.Redis, run_id: str, *, level: str | None = None,
                after: str = "0-0", live: Callable[[], bool] | None = None,
                block_ms: int = 500,
                quiet_s: float = 1.0) -> Iterator[LogLine]:
    """Lines as they arrive after the stream id ``after`` (arrival order).

    Ends once ``live()`` says the run is no longer driven and nothing came for ``quiet_s``
    (so a follow of a finished run drains and exits); without ``live`` it runs until the
    caller stops it (Ctrl-C).
    """
    floor = level_number(level) if level else 0
    key, cursor, idle_since = keys.run_logs(run_id), after, time.monotonic()
    while True:
        got = r.xread({key: cursor}, count=1000, block=block_ms)
        entries = got[0][1] if got else []
        for entry_id, fields in entries:
            cursor = entry_id.decode()
            line = LogLine.from_entry(entry_id, fields)
            if LEVELS.get(line.level, logging.INFO) >= floor:
                yield line
        if entries:
            idle_since = time.monotonic()
        elif live is not None and time.monotonic() - idle_since >= quiet_s and not live():
            return


__all__ = ["LEVELS", "MAX_LINES", "SOURCES", "LogLine", "append_logs", "follow_logs", "last_id",
           "level_name", "level_number", "log_counts", "read_logs", "stream_id_order"]
