"""Run receipts read without decoding every snapshot.

Each ``run.iteration`` line carries a full snapshot (a VEGAS grid, every iteration's
estimate), so a run's log grows by its snapshots and decoding them dominates reading
it: 1,000 three-iteration runs are 16 MB of JSON. The pages need the numbers of every
iteration but the snapshot of the last one only. :class:`LazyReceipts` hands the run
store's own fold (so every topic and rule it knows still applies) iteration payloads
with an empty snapshot and keeps each snapshot's raw bytes, decoded on demand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mainboard.receipts import IterationDone, Receipts

ITERATION_HEAD = b'{"topic":"run.iteration",'
SNAPSHOT_KEY = b',"snapshot":'
WALL_KEY = b',"wall_s":'


class LazyReceipts(Receipts):
    """A run's receipts whose iteration snapshots are decoded only when asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.raw_snapshots: dict[int, bytes] = {}  # iteration -> its latest snapshot's JSON
        self.times: dict[int, float] = {}          # iteration -> when its line was written

    def _decode(self, raw: bytes) -> Any:
        split = _split_snapshot(raw) if raw.startswith(ITERATION_HEAD) else None
        record = json.loads(split[0] if split else raw)
        payload = record.get("payload") if isinstance(record, dict) else None
        iteration = payload.get("iteration") if isinstance(payload, dict) else None
        if raw.startswith(ITERATION_HEAD) and isinstance(iteration, int):
            ts = record.get("ts")  # a later line for the same iteration (a redo) wins
            self.times[iteration] = float(ts) if isinstance(ts, int | float) else 0.0
            if split is not None:
                self.raw_snapshots[iteration] = split[1]
        return record

    def snapshot(self, item: IterationDone) -> dict[str, Any]:
        """The full snapshot of an iteration folded from this log."""
        raw = self.raw_snapshots.get(item.iteration)
        if raw is None:
            return item.snapshot
        try:
            data = json.loads(raw)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}


def _split_snapshot(raw: bytes) -> tuple[bytes, bytes] | None:
    """(the line with ``"snapshot":{}``, the snapshot's JSON) when the line has the layout
    ``Receipts.append`` writes (payload fields in model order, snapshot before wall_s);
    None otherwise (the caller then decodes the whole line)."""
    start = raw.find(SNAPSHOT_KEY)
    end = raw.rfind(WALL_KEY)
    if start < 0 or end < start:
        return None
    body = raw[start + len(SNAPSHOT_KEY):end]
    if not (body.startswith(b"{") and body.endswith(b"}")):
        return None
    return raw[:start] + b',"snapshot":{}' + raw[end:], body


__all__ = ["LazyReceipts"]
