"""A batch's spend so far, recorded as ``batch.cost`` receipts in its own directory.

Each dispatched job carries its own ``job.cost`` observations (``mainboard.jobs.costs``:
its rate fixed at submit, rate x seconds run at submit, each monitor pass and its end);
a watch step sums the last one of each job and appends a ``batch.cost`` line when the
sum changed, so the batch's receipts show its spend growing as its jobs run. Jobs on a
host whose rate is unknown are listed as such and left out of the total, never as 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mainboard.batch.store import BatchStore, BatchView
from mainboard.jobs.costs import cost_entry
from mainboard.jobs.store import JobStore
from mainboard.receipts import BatchCost

if TYPE_CHECKING:
    from pathlib import Path


def batch_cost(state_dir: Path, view: BatchView) -> BatchCost:
    """The spend of ``view``'s dispatched jobs now, from their own cost lines."""
    jobs = JobStore(state_dir)
    entries: dict[str, dict[str, Any]] = {}
    for name, sent in view.dispatched.items():
        job = jobs.view(sent.job, [])
        entry = None if job is None else cost_entry(job)
        if entry is not None:
            entries[name] = {k: entry[k] for k in ("usd_hr", "seconds", "usd", "rate", "at")}
            entries[name]["job"] = sent.job
    known = [e for e in entries.values() if e["usd"] is not None]
    return BatchCost(batch_id=view.id, usd=round(sum(e["usd"] for e in known), 6),
                     seconds=round(sum(e["seconds"] for e in known), 3), jobs=entries,
                     unknown=sorted(n for n, e in entries.items() if e["usd"] is None))


def record_spend(store: BatchStore, view: BatchView) -> BatchCost | None:
    """Append the batch's spend when it differs from the last line: that line, else None."""
    now = batch_cost(store.directory.parent, view)
    if view.cost is not None and view.cost.jobs == now.jobs:
        return None
    store.append(view.id, now)
    view.cost = now
    return now


def spend_json(cost: BatchCost | None) -> dict[str, Any] | None:
    """The spend as ``batch watch``/``show --json`` print it."""
    return None if cost is None else {"usd": cost.usd, "seconds": cost.seconds,
                                      "unknown": cost.unknown, "jobs": cost.jobs}
