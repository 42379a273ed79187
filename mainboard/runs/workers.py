"""Who worked on a run: one row per worker with its host, kind, scheduler job, batches
done, throughput and last sign of life, from the run's spans and the worker registry."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import redis

from mainboard import keys
from mainboard.runs.spans import FINAL_STAGES, Span, read_spans, run_workers


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


def worker_table(r: redis.Redis, run_id: str, spans: list[Span] | None = None
                 ) -> list[WorkerRow]:
    """Rows sorted by worker name; a fleet worker's heartbeat from the registry, else the end
    of its last span (local workers do not beat)."""
    spans = read_spans(r, run_id) if spans is None else spans
    info = run_workers(r, run_id)
    names = sorted({w for w, meta in info.items() if meta.get("kind") != "coordinator"}
                   | {s.worker for s in spans})
    rows = []
    for name in names:
        mine = [s for s in spans if s.worker == name]
        final = list({(s.iteration, s.batch, s.attempt): s for s in mine
                      if s.stage in FINAL_STAGES}.values())
        busy = sum(s.duration for s in mine)
        samples = sum(s.n for s in final)
        last = max((s.start + s.duration for s in mine), default=None)
        meta = info.get(name, {})
        rows.append(WorkerRow(name, str(meta.get("host", "?")), str(meta.get("kind", "?")),
                              str(meta.get("job_id", "")), len(final), samples, busy,
                              samples / busy if busy > 0 else 0.0,
                              _beat(r, name) or last))
    return rows


__all__ = ["WorkerRow", "worker_table"]
