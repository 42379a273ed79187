"""One base for the stores whose only state is receipts: jobs, batches, runs.

Each record (a job, a batch, a run) is one append-only receipts log under a folder of
the workspace's ``.mainboard/``; a store lists the records from the folder, appends
lines (each under the log's own flock), and folds a record's lines into a view. The
subclasses say only where a record's log lives, how to fold it, and what a missing
first line means; listing, scanning and locking are written once, here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from mainboard.errors import ReceiptError
from mainboard.ids import ID, IdForm
from mainboard.locks import flocked
from mainboard.receipts import Payload, Receipts

V = TypeVar("V")


class ReceiptStore(Generic[V]):
    """Records kept as receipt logs, one per record id, under ``state_dir/FOLDER``.

    ``LAYOUT`` places a record's log: ``"{id}.ndjson"`` (a file per record) or
    ``"{id}/receipts.ndjson"`` (a folder per record, for records with more files).
    """

    FOLDER: ClassVar[str]
    LAYOUT: ClassVar[str]
    FIRST: ClassVar[str]  # the topic that opens a record's log (``job.submitted``)
    FORM: ClassVar[IdForm | None] = None  # ids the user may shorten to a unique suffix

    def __init__(self, state_dir: Path) -> None:
        self.directory = Path(state_dir) / self.FOLDER

    # -- the hooks ---------------------------------------------------------------------------

    def fold(self, receipts: Receipts, errors: list[ReceiptError] | None) -> V | None:
        """The record's lines as one view; None without its first line. Bad lines go to
        ``errors`` (or raise ReceiptError when it is None)."""
        raise NotImplementedError

    # -- written once --------------------------------------------------------------------------

    def check(self, record_id: str) -> str:
        """``record_id`` if it can name a record (no slash, quote, dot-first), else the error."""
        if self.FORM is not None:
            return self.FORM.check(record_id)
        if not ID.match(record_id):
            raise ReceiptError(f"{record_id!r} cannot name a record under {self.directory}")
        return record_id

    def path(self, record_id: str) -> Path:
        """The receipts file of ``record_id``."""
        return self.directory / self.LAYOUT.format(id=self.check(record_id))

    def receipts(self, record_id: str) -> Receipts:
        """The receipts log of one record."""
        return Receipts(self.path(record_id))

    def append(self, record_id: str, payload: Payload) -> None:
        """Write one line to the record's log (durable, one flock per write)."""
        self.receipts(record_id).append(payload)

    def ids(self) -> list[str]:
        """Every record id with a receipts log, sorted (ids that start with a time: oldest first)."""
        if not self.directory.is_dir():
            return []
        suffix = self.LAYOUT.format(id="")
        found = (str(p.relative_to(self.directory))[: -len(suffix)]
                 for p in self.directory.glob(self.LAYOUT.format(id="*")))
        return sorted(i for i in found if ID.match(i))

    def resolve(self, ref: str) -> str:
        """The id ``ref`` names: an exact id, or a unique suffix such as ``1a2b3c``."""
        assert self.FORM is not None, f"{type(self).__name__} has no id form"
        self.check(ref)  # refuses what cannot be an id (quotes, slashes...) with the form
        return self.FORM.resolve(ref, self.ids(), self.directory)

    def view(self, record_id: str, errors: list[ReceiptError] | None = None) -> V | None:
        """The record as its receipts say (None without its first line)."""
        return self.fold(self.receipts(record_id), errors)

    def missing(self, record_id: str, why: str) -> ReceiptError:
        """The error for a log without its first line, saying what that costs."""
        return ReceiptError(f"{self.path(record_id)}: no {self.FIRST} line; {why}")

    def scan(self, skipped: str = "skipped") -> tuple[list[V], list[ReceiptError]]:
        """Every record (in ``ids`` order) and every unreadable line or log met on the way."""
        views: list[V] = []
        errors: list[ReceiptError] = []
        for record_id in self.ids():
            view = self.view(record_id, errors)
            if view is None:
                errors.append(self.missing(record_id, skipped))
            else:
                views.append(view)
        return views, errors

    @contextmanager
    def lock(self, name: str = ".lock", wait: float | None = None) -> Iterator[bool]:
        """Hold the store's lock ``name`` (True), or False after ``wait`` seconds (None: block).

        For read-compare-append across threads and processes; flock is released by the
        kernel when a holder dies, so a SIGKILLed writer never leaves it locked.
        """
        with flocked(self.directory / name, wait) as held:
            yield held


__all__ = ["ReceiptStore"]
