"""``plot_line`` and ``image`` tasks on the fleet, the coordinator's side: the points cut
into chunks, one stage task per chunk (:mod:`mainboard.tasks.raster`, the worker's side),
collected in chunk order under the run's lease, silent chunks sent again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import redis
from celery import Celery

from mainboard import keys
from mainboard.errors import IntegrationFailed
from mainboard.integrators import raster
from mainboard.integrators.spec import RunSpec
from mainboard.tasks import BATCH_QUEUE, STAGE_PREFIX
from mainboard.tasks.bundles import pop_done
from mainboard.tasks.codec import dumps, loads
from mainboard.tasks.context import BatchRef
from mainboard.tasks.coordinator import POLL_S, iteration_keys, publish_run
from mainboard.tasks.lease import Lease
from mainboard.tasks.steering import shadow_name

RESEND_S = 60.0  # a chunk unanswered this long goes out again (a worker died with it)
MAX_CHUNK = 65_536


def _columns(width: int, kind: str) -> list[str]:
    if kind == "complex":
        return ["real", "imag"]
    return ["value"] if width == 1 else [f"value_{i}" for i in range(width)]


class Raster:
    """One plot_line or image task's chunks, sent and collected under the run's lease."""

    def __init__(self, app: Celery, r: redis.Redis, lease: Lease, run_id: str,
                 places: dict[str, Any] | None) -> None:
        self.app, self.r, self.lease, self.run_id, self.places = app, r, lease, run_id, places

    def run(self, spec: RunSpec, sampler: Mapping[str, Any], kind: str,
            geometry: Mapping[str, Any], k: int, value_kind: str) -> dict[str, Any]:
        """Evaluate the task as iteration ``k`` of the run; its coordinates and values."""
        total = raster.point_count(kind, geometry)
        chunk = max(1, min(int(spec.batching.batch_size), MAX_CHUNK))
        ranges = [(lo, min(lo + chunk, total)) for lo in range(0, total, chunk)]
        publish_run(self.r, self.run_id, spec.model_dump(mode="json"), self.places)
        with self.r.pipeline(transaction=False) as pipe:
            pipe.delete(*iteration_keys(self.run_id, k))
            pipe.set(keys.iteration_sampler(self.run_id, k), dumps(dict(sampler)))
            pipe.execute()
        try:
            self._collect(spec.name, kind, dict(geometry), k, ranges)
            raw = self.r.hmget(keys.iteration_results(self.run_id, k),
                               [str(i) for i in range(len(ranges))])
        finally:
            self.r.delete(*iteration_keys(self.run_id, k))
        vals = np.concatenate([np.asarray(loads(x)["values"]) for x in raw])
        coords = raster.coordinates(kind, geometry, 0, total)
        names = ["t"] if kind == "plot_line" else ["u", "v"]
        out: dict[str, Any] = {name: coords[:, j].tolist() for j, name in enumerate(names)}
        out.update(coordinates=names, columns=_columns(vals.shape[1], value_kind),
                   values=vals.tolist())
        return out

    def _send(self, name: str, kind: str, geometry: dict[str, Any], k: int, i: int,
              lo: int, hi: int, attempt: int) -> None:
        message = {"ref": BatchRef(self.run_id, k, i, hi - lo, attempt).to_dict(),
                   "kind": kind, "geometry": geometry, "lo": lo, "hi": hi}
        self.app.send_task(STAGE_PREFIX + "raster", args=(message,), queue=BATCH_QUEUE,
                           ignore_result=True, shadow=shadow_name("raster", name, k + 1, i))

    def _collect(self, name: str, kind: str, geometry: dict[str, Any], k: int,
                 ranges: list[tuple[int, int]]) -> None:
        """Send every chunk, wait for each to be stored (re-sending the silent ones)."""
        for i, (lo, hi) in enumerate(ranges):
            self._send(name, kind, geometry, k, i, lo, hi, 0)
        pending, attempt = set(range(len(ranges))), 0
        heard = time.monotonic()
        done_key = keys.iteration_done(self.run_id, k)
        while pending:
            entries = pop_done(self.r, done_key, POLL_S)
            self.lease.refresh()
            for entry in entries:
                if entry.startswith(b"e:"):
                    raise self._failure(k, int(entry[2:]))
                if entry[:1].isdigit():
                    pending.discard(int(entry))
                    heard = time.monotonic()
            if pending and time.monotonic() - heard > RESEND_S:
                attempt += 1
                for i in sorted(pending):
                    self._send(name, kind, geometry, k, i, *ranges[i], attempt)
                heard = time.monotonic()

    def _failure(self, k: int, chunk: int) -> IntegrationFailed:
        raw = self.r.hget(keys.iteration_errors(self.run_id, k), str(chunk))
        rec = loads(raw) if raw else {"error": "unknown", "message": "?", "worker": "?"}
        return IntegrationFailed(f"run {self.run_id}: chunk {chunk} of a raster task failed "
                                 f"on worker {rec['worker']}: {rec['error']}: "
                                 f"{rec['message']}", batch=chunk, stage="raster")


__all__ = ["Raster"]
