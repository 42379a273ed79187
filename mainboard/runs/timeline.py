"""The timeline of a run: when each iteration was dispatched, completed, adapted and
snapshotted, every re-send, pause, resume and stop, read from the run's receipts.

Why receipts: they outlive the broker, so the timeline of a run is there after its keys
are gone; the phase times ride on each iteration's receipt line (no extra write per phase).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mainboard.receipts import (
    BatchResent,
    IterationDone,
    Payload,
    RunCreated,
    RunFailed,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStopped,
)
from mainboard.runs.lazy import LazyReceipts
from mainboard.runs.store import RunStore

KINDS = ("start", "dispatch", "complete", "resend", "adapt", "snapshot", "pause", "resume",
         "stop", "finish", "fail")
_PHASES = ("dispatch", "complete", "adapt")


@dataclass(frozen=True)
class Event:
    """One thing that happened to a run (``iteration`` counts from 1, as ``runs show``)."""

    time: float
    kind: str
    iteration: int | None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _events(ts: float, item: Payload) -> list[Event]:
    if isinstance(item, RunCreated):
        return [Event(ts, "start", item.from_iteration, f"run {item.name} created"
                      + (f" (clone of {item.parent})" if item.parent else ""))]
    if isinstance(item, IterationDone):
        k = item.iteration
        found = [Event(item.times[p], p, k, f"{item.batches} batches" if p == "dispatch"
                       and item.batches else "") for p in _PHASES if p in item.times]
        return [*found, Event(ts, "snapshot", k, f"{item.samples:,} samples")]
    if isinstance(item, BatchResent):
        return [Event(ts, "resend", item.iteration, f"batch {item.batch} attempt "
                      f"{item.attempt}: {item.reason}")]
    if isinstance(item, RunPaused):
        return [Event(ts, "pause", item.iteration, f"{item.stored} batches of the next "
                      "iteration kept" if item.stored else "")]
    if isinstance(item, RunResumed):
        return [Event(ts, "resume", item.from_iteration, "")]
    if isinstance(item, RunStopped):
        return [Event(ts, "stop", item.iteration, "partial result kept")]
    if isinstance(item, RunFinished):
        return [Event(ts, "finish", item.result.get("iterations"),
                      str(item.result.get("stop_reason") or ""))]
    if isinstance(item, RunFailed):
        return [Event(ts, "fail", item.iteration, item.error)]
    return []


def timeline(store: RunStore, run_id: str) -> list[Event]:
    """The latest execution's events in time order (a ``run.created`` line starts each).

    Read with the snapshots cut out unread (no event needs one): a long run's receipts are
    mostly snapshots, and an open run page asks for its timeline after every iteration.
    """
    events: list[Event] = []
    for ts, item in LazyReceipts(store.path(run_id)).read_timed():
        if isinstance(item, RunCreated):
            events = []
        events.extend(_events(ts, item))
    return sorted(events, key=lambda e: e.time)


__all__ = ["KINDS", "Event", "timeline"]
