"""Batches as their receipts tell it: ``.mainboard/batches/<id>/receipts.ndjson``.

A batch has no other state. ``batch.created`` fixes its jobs; ``batch.dispatched`` /
``batch.dispatch_failed`` say where each went; ``batch.announced`` is written once per
job when its outcome is known (the watch's cursor); ``batch.finished`` closes it;
``batch.cost`` lines record its spend so far whenever it changed.
Every verb replays these lines, so a ``watch`` killed at any point and started again
(or a second one running beside it) continues exactly where the lines say.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from mainboard.batch.spec import BatchJob
from mainboard.errors import ReceiptError, UnknownBatch
from mainboard.ids import IdForm
from mainboard.receipts import (
    BatchAnnounced,
    BatchCost,
    BatchCreated,
    BatchDispatched,
    BatchDispatchFailed,
    BatchFinished,
    Receipts,
)
from mainboard.store import ReceiptStore

RECEIPTS = "receipts.ndjson"


FORM = IdForm("batch", "batches", "20250101-120000-sweep-1a2b3c", "mainboard batch list",
              UnknownBatch)


@dataclass
class BatchView:
    """One batch replayed from its receipts."""

    created: BatchCreated
    created_at: float
    jobs: list[BatchJob]
    dispatched: dict[str, BatchDispatched] = field(default_factory=dict)
    failed: dict[str, BatchDispatchFailed] = field(default_factory=dict)
    announced: dict[str, BatchAnnounced] = field(default_factory=dict)
    finished: BatchFinished | None = None
    errors: list[ReceiptError] = field(default_factory=list)
    cost: BatchCost | None = None   # the last spend recorded (``mainboard.batch.spend``)

    @property
    def id(self) -> str:
        return self.created.batch_id

    @property
    def name(self) -> str:
        return self.created.name

    @property
    def undispatched(self) -> list[BatchJob]:
        """Jobs neither accepted by their target nor recorded as failing to reach it."""
        return [j for j in self.jobs if j.name not in self.dispatched and j.name not in self.failed]

    @property
    def complete(self) -> bool:
        """Every job has an announced outcome."""
        return all(j.name in self.announced for j in self.jobs)

    def outcomes(self) -> dict[str, int]:
        """How many jobs ended each way so far (announced outcomes only)."""
        counts: dict[str, int] = {}
        for entry in self.announced.values():
            counts[entry.outcome] = counts.get(entry.outcome, 0) + 1
        return dict(sorted(counts.items()))


def replay(receipts: Receipts) -> BatchView | None:
    """Fold a batch's lines into a view; None without a readable ``batch.created`` line.

    Unreadable lines are kept in ``errors`` (file:line) and the rest is still read; a
    second line for something already recorded (a race lost) is ignored: first wins.
    """
    errors: list[ReceiptError] = []
    view: BatchView | None = None
    for ts, payload in receipts.read_timed(errors=errors):
        if isinstance(payload, BatchCreated):
            if view is None:
                jobs = [BatchJob.model_validate(j) for j in payload.jobs]
                view = BatchView(created=payload, created_at=ts, jobs=jobs)
        elif view is None:
            continue
        elif isinstance(payload, BatchDispatched):
            view.dispatched.setdefault(payload.name, payload)
        elif isinstance(payload, BatchDispatchFailed):
            view.failed.setdefault(payload.name, payload)
        elif isinstance(payload, BatchAnnounced):
            view.announced.setdefault(payload.name, payload)
        elif isinstance(payload, BatchFinished) and view.finished is None:
            view.finished = payload
        elif isinstance(payload, BatchCost):
            view.cost = payload
    if view is not None:
        view.errors = errors
    return view


class BatchStore(ReceiptStore[BatchView]):
    """The batches of one workspace state directory (``.mainboard/batches/<id>/``)."""

    FOLDER, LAYOUT, FIRST, FORM = "batches", "{id}/" + RECEIPTS, "readable batch.created", FORM
    UNKNOWN_JOBS = "the batch's jobs are unknown without it"

    def fold(self, receipts: Receipts, errors: list[ReceiptError] | None) -> BatchView | None:
        view = replay(receipts)
        if view is not None and errors is not None:
            errors += view.errors
        return view

    def folder(self, batch_id: str) -> Path:
        """The batch's directory (refusing ids that are not plain names)."""
        return self.path(batch_id).parent

    def load(self, ref: str) -> BatchView:
        """The batch ``ref`` names; ReceiptError when its ``batch.created`` line is unreadable."""
        batch_id = self.resolve(ref)
        view = self.view(batch_id)
        if view is None:
            raise self.missing(batch_id, self.UNKNOWN_JOBS)
        return view

    def scan(self, skipped: str = UNKNOWN_JOBS) -> tuple[list[BatchView], list[ReceiptError]]:
        """Every readable batch (oldest first) and the problems met on the way."""
        return super().scan(skipped)

    def locked(self, batch_id: str, what: str,
               wait: float | None = None) -> AbstractContextManager[bool]:
        """Hold the batch's ``what`` lock (True), or False after ``wait`` seconds (None: block)."""
        return self.lock(f"{self.check(batch_id)}/{what}.lock", wait)
