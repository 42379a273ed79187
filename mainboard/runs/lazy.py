"""Run receipts read without reading every snapshot.

Each ``run.iteration`` line carries a full snapshot (a VEGAS grid, every iteration's
estimate), so a run's log is mostly snapshots: 1,000 three-iteration runs of an 8-d VEGAS
run are 330 MB of JSON. The runs list, ``runs show NAME`` resolving a name, and the
dashboard need the numbers of every iteration but the snapshot of the last one at most.
:class:`LazyReceipts` hands the run store's own fold (so every topic and rule it knows
still applies) iteration payloads with an empty snapshot: the file is mapped, each line's
snapshot is cut out by byte offsets without being copied or decoded, and read back from
the file (append-only, so its offsets stay valid) only when asked for.
"""

from __future__ import annotations

import json
import mmap
import os
from collections import deque
from pathlib import Path
from typing import Any

from mainboard.receipts import IterationDone, Receipts

ITERATION_HEAD = b'{"topic":"run.iteration",'
SNAPSHOT_KEY = b',"snapshot":'
WALL_KEY = b',"wall_s":'
EMPTY_SNAPSHOT = b',"snapshot":{}'

Span = tuple[int, int]  # [start, end) of a snapshot's JSON in the file


class LazyReceipts(Receipts):
    """A run's receipts whose iteration snapshots are read and decoded only when asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.raw_snapshots: dict[int, Span] = {}  # iteration -> its latest snapshot's bytes
        self.times: dict[int, float] = {}          # iteration -> when its line was written
        self._cut: deque[Span | None] = deque()    # per iteration line, in order: its cut

    def _lines(self) -> list[bytes]:
        """The lines, each iteration line with ``"snapshot":{}`` for its snapshot (whose
        offsets go to ``_cut``, in line order, for ``_decode`` to take)."""
        self._cut.clear()
        with self.path.open("rb") as fh:
            try:
                data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file cannot be mapped
                return [b""]
        with data:
            lines: list[bytes] = []
            start, size = 0, len(data)
            while True:
                end = data.find(b"\n", start)
                stop = size if end < 0 else end
                if data[start:start + len(ITERATION_HEAD)] == ITERATION_HEAD:
                    span = _snapshot_span(data, start, stop)
                    self._cut.append(span)
                    lines.append(data[start:stop] if span is None else
                                 data[start:span[0] - len(SNAPSHOT_KEY)] + EMPTY_SNAPSHOT
                                 + data[span[1]:stop])
                else:
                    lines.append(data[start:stop])
                if end < 0:
                    return lines
                start = end + 1

    def _decode(self, raw: bytes) -> Any:
        if not raw.startswith(ITERATION_HEAD):
            return json.loads(raw)
        span = self._cut.popleft() if self._cut else None  # before a bad line can raise
        record = json.loads(raw)
        payload = record.get("payload") if isinstance(record, dict) else None
        iteration = payload.get("iteration") if isinstance(payload, dict) else None
        if isinstance(iteration, int):
            ts = record.get("ts")  # a later line for the same iteration (a redo) wins
            self.times[iteration] = float(ts) if isinstance(ts, int | float) else 0.0
            if span is not None:
                self.raw_snapshots[iteration] = span
        return record

    def snapshot(self, item: IterationDone) -> dict[str, Any]:
        """The full snapshot of an iteration folded from this log ({} when the file changed
        under us so that the bytes no longer decode)."""
        span = self.raw_snapshots.get(item.iteration)
        if span is None:
            return item.snapshot
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                data = json.loads(os.pread(fd, span[1] - span[0], span[0]))
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def _snapshot_span(data: mmap.mmap, start: int, stop: int) -> Span | None:
    """Where the snapshot's JSON lies in a line with the layout ``Receipts.append`` writes
    (payload fields in model order, snapshot before wall_s); None otherwise (the line is
    then decoded whole)."""
    at = data.find(SNAPSHOT_KEY, start, stop)
    end = data.rfind(WALL_KEY, start, stop)
    if at < 0 or end < at:
        return None
    body = at + len(SNAPSHOT_KEY)
    if data[body:body + 1] != b"{" or data[end - 1:end] != b"}":
        return None
    return body, end


__all__ = ["LazyReceipts"]
