"""Batches as their receipts tell it: ``.mainboard/batches/<id>/receipts.ndjson``.

A batch has no other state. ``batch.created`` fixes its jobs; ``batch.dispatched`` /
``batch.dispatch_failed`` say where each went; ``batch.announced`` is written once per
job when its outcome is known (the watch's cursor); ``batch.finished`` closes it.
Every verb replays these lines, so a ``watch`` killed at any point and started again
(or a second one running beside it) continues exactly where the lines say.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mainboard.batch.spec import BatchJob
from mainboard.errors import UserError
from mainboard.ids import ID, IdForm
from mainboard.locks import flocked
from mainboard.receipts import (
    BatchAnnounced,
    BatchCreated,
    BatchDispatched,
    BatchDispatchFailed,
    BatchFinished,
    ReceiptError,
    Receipts,
)

RECEIPTS = "receipts.ndjson"


class UnknownBatch(UserError):
    """No batch (or more than one) matches the id or id suffix the user gave."""


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
    if view is not None:
        view.errors = errors
    return view


class BatchStore:
    """The batches of one workspace state directory (``.mainboard``)."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = Path(state_dir) / "batches"

    def folder(self, batch_id: str) -> Path:
        """The batch's directory (refusing ids that are not plain names)."""
        return self.directory / FORM.check(batch_id)

    def receipts(self, batch_id: str) -> Receipts:
        return Receipts(self.folder(batch_id) / RECEIPTS)

    def ids(self) -> list[str]:
        """Every batch id with receipts, oldest first (ids start with their creation time)."""
        if not self.directory.is_dir():
            return []
        return sorted(p.parent.name for p in self.directory.glob(f"*/{RECEIPTS}")
                      if ID.match(p.parent.name))

    def resolve(self, ref: str) -> str:
        """The id ``ref`` names: an exact id, or a unique suffix such as ``1a2b3c``."""
        return FORM.resolve(ref, self.ids(), self.directory)

    def load(self, ref: str) -> BatchView:
        """The batch ``ref`` names; ReceiptError when its ``batch.created`` line is unreadable."""
        batch_id = self.resolve(ref)
        receipts = self.receipts(batch_id)
        view = replay(receipts)
        if view is None:
            raise ReceiptError(f"{receipts.path}: no readable batch.created line; the batch's "
                               "jobs are unknown without it")
        return view

    def scan(self) -> tuple[list[BatchView], list[ReceiptError]]:
        """Every readable batch (oldest first) and the problems met on the way."""
        views: list[BatchView] = []
        problems: list[ReceiptError] = []
        for batch_id in self.ids():
            try:
                views.append(self.load(batch_id))
            except ReceiptError as exc:
                problems.append(exc)
                continue
            problems += views[-1].errors
        return views, problems

    @contextmanager
    def locked(self, batch_id: str, what: str, wait: float | None = None) -> Iterator[bool]:
        """Hold the batch's ``what`` lock (True), or False after ``wait`` seconds.

        ``wait=None`` blocks. flock is released by the kernel when a holder dies, so a
        SIGKILLed ``run`` or ``watch`` never leaves a batch locked.
        """
        with flocked(self.folder(batch_id) / f"{what}.lock", wait) as held:
            yield held
