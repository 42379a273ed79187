"""Watching a batch: the monitor sweep, annotated with the batch's jobs, until each has an outcome.

A watch step (1) finishes an interrupted dispatch, (2) runs one ``monitor_pass`` scoped
to the batch's jobs (the same sweep as ``mainboard monitor``: probe, record verdicts,
pull results, release rentals; other jobs are left for a plain pass to announce),
then (3) announces, under the batch's ``announce`` lock, every job whose outcome is now
known and not yet announced: one ``batch.announced`` line each. The set of those lines
is the cursor: a watch killed mid-way and started again, or two watches side by side,
announce every job exactly once. When all are announced, ``batch.finished`` is written
once. A job's outcome is known when its verdict is recorded and, if it has ``fetch``
paths, its results were pulled. Each step ends by recording the batch's spend so far
(``mainboard.batch.spend``: a ``batch.cost`` line when it changed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mainboard.batch.run import dispatch, store_of
from mainboard.batch.spend import record_spend, spend_json
from mainboard.batch.store import BatchView
from mainboard.jobs.monitor import monitor_pass
from mainboard.jobs.store import JobStore, JobView
from mainboard.receipts import BatchAnnounced, BatchCost, BatchFinished, Payload

if TYPE_CHECKING:
    from mainboard.hosts.access import Hosts


@dataclass(frozen=True)
class JobRow:
    """One batch job now: where it went, its state, and its outcome once known."""

    name: str
    target: str
    state: str
    job: str | None = None
    exit_code: int | None = None
    outcome: str | None = None      # set once the job has an outcome (final, results pulled)
    detail: str = ""
    pulled: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _job_row(name: str, target: str, job_id: str, view: JobView | None,
             unreachable: Mapping[str, str]) -> JobRow:
    """A dispatched job's row from its own receipts."""
    if view is None:  # written before batch.dispatched: only corruption loses it
        return JobRow(name, target, "error", job_id, outcome="error",
                      detail=f"no readable job.submitted line for job {job_id}; its state "
                             "cannot be followed (`mainboard jobs show` it)")
    notes = [view.reason] if view.reason else []
    pulled = view.pulled
    pulled_paths = pulled.paths if pulled is not None else []
    missing = pulled.missing if pulled is not None else []
    if pulled is not None and pulled.error:
        notes.append(f"results not pulled: {pulled.error}")
    if missing:
        notes.append(f"missing: {', '.join(missing)}")
    if target in unreachable and not view.finished:
        notes.append(f"host unreachable: {unreachable[target]}")
    state = view.state.value
    outcome = None
    if view.finished and (not view.submitted.fetch or pulled is not None):
        outcome = state
    elif view.finished:
        state = f"{state}, pulling"
    return JobRow(name, target, state, job_id, view.exit_code, outcome, "; ".join(notes),
                  list(pulled_paths), list(missing))


def job_rows(board: Hosts, view: BatchView,
             unreachable: Mapping[str, str] | None = None) -> list[JobRow]:
    """Every job of the batch now, from the batch's and the jobs' receipts (no host asked)."""
    jobs = JobStore(board.config.state_dir)
    rows: list[JobRow] = []
    for job in view.jobs:
        failed = view.failed.get(job.name)
        sent = view.dispatched.get(job.name)
        if failed is not None:
            row = JobRow(job.name, job.target, failed.outcome, outcome=failed.outcome,
                         detail=failed.reason)
        elif sent is not None:
            row = _job_row(job.name, job.target, sent.job, jobs.view(sent.job, []),
                           unreachable or {})
        else:
            row = JobRow(job.name, job.target, "not dispatched yet")
        told = view.announced.get(job.name)
        if told is not None:  # what was announced stays the outcome, whatever came later
            row = JobRow(row.name, row.target, told.outcome, told.job, told.exit_code,
                         told.outcome, told.reason, list(told.pulled), list(told.missing))
        rows.append(row)
    return rows


def announce(board: Hosts, batch_id: str, unreachable: Mapping[str, str] | None = None
             ) -> tuple[list[BatchAnnounced], BatchView, list[JobRow]]:
    """Record every outcome known and not yet announced (once each, under a lock)."""
    store = store_of(board)
    receipts = store.receipts(batch_id)
    new: list[BatchAnnounced] = []
    with store.locked(batch_id, "announce"):
        view = store.load(batch_id)
        for row in job_rows(board, view, unreachable):
            if row.outcome is None or row.name in view.announced:
                continue
            payload = BatchAnnounced(batch_id=batch_id, name=row.name, target=row.target,
                                     outcome=row.outcome, job=row.job, exit_code=row.exit_code,
                                     reason=row.detail, pulled=row.pulled, missing=row.missing)
            receipts.append(payload)
            new.append(payload)
        if new or (view.complete and view.finished is None):
            view = store.load(batch_id)
            if view.complete and view.finished is None:
                receipts.append(BatchFinished(batch_id=batch_id, outcomes=view.outcomes()))
                view = store.load(batch_id)
    return new, view, job_rows(board, view, unreachable)


@dataclass
class WatchStep:
    """What one watch step saw and did."""

    view: BatchView
    rows: list[JobRow]
    announced: list[BatchAnnounced]          # outcomes announced by this step
    dispatched: list[Payload]                # dispatch lines this step wrote (a resumed run)
    unreachable: dict[str, str]              # host -> why, from this step's monitor pass
    errors: list[str]                        # unreadable receipt lines, rentals not released
    spent: BatchCost | None = None           # the batch.cost line this step wrote (news)

    @property
    def complete(self) -> bool:
        return self.view.complete


def watch_step(board: Hosts, batch_id: str, *, lock_wait: float = 30.0) -> WatchStep:
    """One step: finish dispatching, one monitor pass if a job is still owed, announce."""
    dispatched = dispatch(board, batch_id, wait=0)
    view = store_of(board).load(batch_id)
    unreachable: dict[str, str] = {}
    errors = [str(e) for e in view.errors]
    owed = {view.dispatched[j.name].job for j in view.jobs
            if j.name in view.dispatched and j.name not in view.announced}
    if owed:  # only this batch's jobs: the others stay news for a plain `mainboard monitor`
        report = monitor_pass(board, only=owed, lock_wait=lock_wait)
        unreachable = dict(report.get("host_errors") or {})
        errors += list(report.get("errors") or [])
    new, view, rows = announce(board, batch_id, unreachable)
    spent = record_spend(store_of(board), view)  # after the pass: its observations count
    return WatchStep(view, rows, new, dispatched, unreachable, errors, spent)


def watch(board: Hosts, ref: str, *, interval: float = 5.0,
          on_step: Callable[[WatchStep], None] | None = None,
          lock_wait: float = 30.0) -> WatchStep:
    """Step every ``interval`` seconds until every job has an outcome; the last step."""
    batch_id = store_of(board).resolve(ref)
    while True:
        step = watch_step(board, batch_id, lock_wait=lock_wait)
        if on_step is not None:
            on_step(step)
        if step.complete:
            return step
        time.sleep(interval)


def summary(view: BatchView, rows: list[JobRow]) -> dict[str, Any]:
    """The batch in one JSON-ready dict: counts by outcome and every job's row."""
    return {"batch": view.id, "name": view.name, "fleet": view.created.fleet,
            "jobs": len(view.jobs), "complete": view.complete, "outcomes": view.outcomes(),
            "ok": view.complete and all(r.outcome == "completed" for r in rows),
            "rows": [r.as_json() for r in rows], "spend": spend_json(view.cost)}
