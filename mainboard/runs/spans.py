"""Spans of a run: one per stage of each batch (who ran it, where, when, for how long).

Why Redis again: a span is made on whatever host ran the stage, and the broker is the one
place every host reaches. Workers keep spans in memory on the hot path and ship them in
the background (``mainboard.tasks.telemetry``); this module only defines the entry, the
clock each worker measures against Redis ``TIME``, and the reader.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from mainboard import keys

MAX_SPANS = 500_000
# The stage that stores a batch's result: ``evaluate`` ends a chain since chains lost their
# ``accumulate`` task (older runs have both: count a batch attempt once).
FINAL_STAGES = ("accumulate", "fused", "evaluate")


def clock_offset(r: redis.Redis) -> float:
    """Seconds to add to this host's ``time.time()`` to get the Redis server's clock
    (half the round trip assumed each way, as NTP does)."""
    before = time.time()
    seconds, micros = r.time()
    after = time.time()
    return seconds + micros / 1e6 - (before + after) / 2


@dataclass(frozen=True)
class Span:
    """One stage of one batch attempt on one worker; ``start`` on the Redis clock."""

    stage: str
    run: str
    iteration: int
    batch: int
    n: int
    worker: str
    start: float
    duration: float
    attempt: int = 0
    attrs: Mapping[str, Any] = field(default_factory=dict)  # a user span's (mainboard.span)

    def to_fields(self) -> dict[str, str]:
        """The stream entry (short field names: there are many)."""
        return {"s": self.stage, "it": str(self.iteration), "b": str(self.batch),
                "n": str(self.n), "a": str(self.attempt), "w": self.worker,
                "t": repr(self.start), "d": repr(self.duration),
                **({"x": json.dumps(dict(self.attrs), default=str)} if self.attrs else {})}

    @classmethod
    def from_entry(cls, run_id: str, fields: Mapping[bytes, bytes]) -> Span:
        """Inverse of :meth:`to_fields`."""
        f = {k.decode(): v.decode() for k, v in fields.items()}
        return cls(f["s"], run_id, int(f["it"]), int(f["b"]), int(f["n"]), f["w"],
                   float(f["t"]), float(f["d"]), int(f.get("a", 0)),
                   json.loads(f["x"]) if "x" in f else {})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def append_spans(pipe: Any, run_id: str, spans: Iterable[Span]) -> None:
    """Queue spans on a pipeline (the caller executes it)."""
    key = keys.run_spans(run_id)
    for span in spans:
        pipe.xadd(key, span.to_fields(), maxlen=MAX_SPANS, approximate=True)


def read_spans(r: redis.Redis, run_id: str) -> list[Span]:
    """Every span of the run still kept, in start order."""
    spans = [Span.from_entry(run_id, f) for _i, f in r.xrange(keys.run_spans(run_id))]
    return sorted(spans, key=lambda s: s.start)


def register_worker(pipe: Any, run_id: str, worker: str, info: Mapping[str, Any]) -> None:
    """Record who works on the run (host, kind, job id, clock offset), once per process."""
    pipe.hset(keys.run_workers(run_id), worker, json.dumps(dict(info), sort_keys=True))


def run_workers(r: redis.Redis, run_id: str) -> dict[str, dict[str, Any]]:
    """worker -> {host, kind, job_id, offset, pid} of every worker that ran a stage."""
    return {k.decode(): json.loads(v) for k, v in r.hgetall(keys.run_workers(run_id)).items()}


__all__ = ["FINAL_STAGES", "MAX_SPANS", "Span", "append_spans", "clock_offset", "read_spans",
           "register_worker", "run_workers"]
