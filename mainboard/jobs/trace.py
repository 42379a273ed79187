"""The phases of a Board job, from its receipts: sync, submit, queue wait, run, pull.

Why receipts: every phase already ends in a receipt line (or carries its own times on
one), so the spans cost nothing while the job runs and exist for any job ever submitted.
Queue wait and run end where the monitor first saw the job running and finished: as
precise as its polling.
"""

from __future__ import annotations

from dataclasses import dataclass

from mainboard.jobs.store import JobStore
from mainboard.receipts import JobFinished, JobPulled, JobStateChanged, JobSubmitted


@dataclass(frozen=True)
class Phase:
    """One phase of a job, unix seconds."""

    name: str
    start: float
    end: float


def job_phases(store: JobStore, job_id: str) -> list[Phase]:
    """The job's phases in time order (those it reached so far)."""
    submitted: JobSubmitted | None = None
    running = finished = None
    pulls: list[Phase] = []
    for ts, item in store.receipts(job_id).read_timed():
        if isinstance(item, JobSubmitted):
            submitted = item
        elif isinstance(item, JobStateChanged) and item.state == "running" and running is None:
            running = ts
        elif isinstance(item, JobFinished) and finished is None:
            finished = ts
            if running is None and item.started_at is not None:  # ended between two looks
                running = item.started_at
        elif isinstance(item, JobPulled):
            pulls.append(Phase("pull", item.started_at or ts, ts))
    if submitted is None:
        return []
    out = [Phase(name, span[0], span[1]) for name, span in submitted.phases.items()
           if len(span) == 2]
    queued = submitted.phases.get("submit", [submitted.submitted_at] * 2)[-1]
    started = running if running is not None else finished
    if started is not None:
        out.append(Phase("queue wait", queued, started))
    if running is not None and finished is not None:
        out.append(Phase("run", running, finished))
    return sorted(out + pulls, key=lambda p: p.start)


__all__ = ["Phase", "job_phases"]
