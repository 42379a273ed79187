"""Who worked on a run: one row per worker with its host, kind, scheduler job, batches
done, throughput and last sign of life, from the run's spans and the worker registry."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from mainboard import keys
from mainboard.runs.spans import FINAL_STAGES, Span, run_workers
from mainboard.runs.userspans import USER_PREFIX


@dataclass(frozen=True)
class WorkerRow:
    """One worker of a run (``samples_per_s`` over the time its stages ran)."""

    worker: str
    host: str
    kind: str
    job_id: str
    batches: int
    samples: int
    busy_s: float
    samples_per_s: float
    last_heartbeat: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _beat(r: redis.Redis, worker: str) -> float | None:
    try:
        raw = r.hget(keys.worker(worker), "beat")
    except ValueError:  # a name the registry cannot hold was never registered
        return None
    return float(raw) if raw else None


@dataclass
class _Sums:
    """One worker's spans so far: final stages by (iteration, batch, attempt), busy time."""

    finals: dict[tuple[int, int, int], int] = field(default_factory=dict)
    busy: float = 0.0
    last: float | None = None


class WorkerTally:
    """Per-worker sums of a run's spans, read incrementally: each ``update`` reads only the
    spans added since the last one (an open run page asks after every iteration, and a long
    run has hundreds of thousands of spans). Starts over when the stream was trimmed or
    recreated (its first entry changed)."""

    READ = 10_000

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._first: bytes | None = None
        self._cursor: bytes | None = None
        self._sums: dict[str, _Sums] = {}
        self._lock = threading.Lock()  # the dashboard serves requests from a thread pool

    def table(self, r: redis.Redis) -> list[WorkerRow]:
        """Read what was added, then the rows (one caller at a time)."""
        with self._lock:
            return self.update(r).rows(r)

    def add(self, span: Span) -> None:
        """Count one span (a user span is inside a stage's: not counted twice)."""
        if span.stage.startswith(USER_PREFIX):
            return
        sums = self._sums.setdefault(span.worker, _Sums())
        if span.stage in FINAL_STAGES:
            sums.finals[(span.iteration, span.batch, span.attempt)] = span.n
        sums.busy += span.duration
        end = span.start + span.duration
        sums.last = end if sums.last is None else max(sums.last, end)

    def update(self, r: redis.Redis) -> WorkerTally:
        """Read the spans added since the last update."""
        key = keys.run_spans(self.run_id)
        head = r.xrange(key, count=1)
        first = head[0][0] if head else None
        if first != self._first:
            self._first, self._cursor, self._sums = first, None, {}
        while first is not None:
            low = b"-" if self._cursor is None else b"(" + self._cursor
            got = r.xrange(key, min=low, count=self.READ)
            for _entry_id, fields in got:
                self.add(Span.from_entry(self.run_id, fields))
            if got:
                self._cursor = got[-1][0]
            if len(got) < self.READ:
                break
        return self

    def rows(self, r: redis.Redis) -> list[WorkerRow]:
        """Rows sorted by worker name; a fleet worker's heartbeat from the registry, else the
        end of its last span (local workers do not beat)."""
        info = run_workers(r, self.run_id)
        names = sorted({w for w, meta in info.items() if meta.get("kind") != "coordinator"}
                       | set(self._sums))
        rows = []
        for name in names:
            sums = self._sums.get(name, _Sums())
            samples = sum(sums.finals.values())
            meta = info.get(name, {})
            rows.append(WorkerRow(name, str(meta.get("host", "?")), str(meta.get("kind", "?")),
                                  str(meta.get("job_id", "")), len(sums.finals), samples,
                                  sums.busy, samples / sums.busy if sums.busy > 0 else 0.0,
                                  _beat(r, name) or sums.last))
        return rows


def worker_table(r: redis.Redis, run_id: str, spans: list[Span] | None = None
                 ) -> list[WorkerRow]:
    """One row per worker of the run (from ``spans`` when given, else the run's stream)."""
    tally = WorkerTally(run_id)
    if spans is None:
        tally.update(r)
    else:
        for span in spans:
            tally.add(span)
    return tally.rows(r)


__all__ = ["WorkerRow", "WorkerTally", "worker_table"]
