"""A study's ledger, ``.mainboard/studies/<id>.ndjson``: its runs and their verdicts.

``study run`` appends a ``study.job`` line per job it submits (or adopts); the monitor
appends one ``study.verdict`` line per job outcome (``mainboard.jobs.verdicts``). A run
id submitted again (after a failure) keeps all its lines; the view shows its latest job
and that job's verdict, and how many times it was submitted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mainboard.errors import ReceiptError, StudyError
from mainboard.ids import ID
from mainboard.receipts import Receipts, StudyJob, StudyVerdict
from mainboard.statedir import STUDIES
from mainboard.store import ReceiptStore

__all__ = ["RunEntry", "StudyStore", "StudyView", "VERDICTS"]

VERDICTS = ("completed", "failed", "lost", "cancelled")
RETRIED = ("failed", "lost", "cancelled")  # verdicts after which `study run` submits again


@dataclass(frozen=True)
class RunEntry:
    """One run id: its latest job, when it was submitted, its verdict (None: in flight)."""

    submitted: StudyJob
    submitted_at: float
    attempts: int
    verdict: StudyVerdict | None = None

    @property
    def outcome(self) -> str:
        """The verdict's word, or ``in-flight``."""
        return self.verdict.verdict if self.verdict is not None else "in-flight"

    def as_json(self) -> dict[str, Any]:
        v = self.verdict
        return {"run_id": self.submitted.run_id, "name": self.submitted.name,
                "target": self.submitted.target, "job": self.submitted.job,
                "params": self.submitted.params, "inputs": self.submitted.inputs,
                "submitted_at": self.submitted_at, "attempts": self.attempts,
                "verdict": self.outcome, "exit_code": v.exit_code if v else None,
                "reason": v.reason if v else ""}


@dataclass(frozen=True)
class StudyView:
    """A study as its ledger says: each run id's latest entry, in first-submitted order."""

    id: str
    runs: dict[str, RunEntry] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """How many runs have each verdict, and how many are still in flight."""
        found = Counter(e.outcome for e in self.runs.values())
        return {word: found[word] for word in (*VERDICTS, "in-flight")}

    def as_json(self) -> dict[str, Any]:
        return {"study": self.id, "runs": [e.as_json() for e in self.runs.values()],
                "counts": self.counts(), "complete": self.counts()["in-flight"] == 0}


class StudyStore(ReceiptStore[StudyView]):
    """The study ledgers of one workspace (``.mainboard/studies/<id>.ndjson``)."""

    FOLDER, LAYOUT, FIRST = STUDIES, "{id}.ndjson", "study.job"

    def fold(self, receipts: Receipts, errors: list[ReceiptError] | None) -> StudyView | None:
        latest: dict[str, tuple[StudyJob, float, int]] = {}
        verdicts: dict[str, StudyVerdict] = {}
        for ts, payload in receipts.read_timed(errors=errors):
            if isinstance(payload, StudyJob):
                attempts = latest[payload.run_id][2] + 1 if payload.run_id in latest else 1
                latest[payload.run_id] = (payload, ts, attempts)
            elif isinstance(payload, StudyVerdict):
                verdicts.setdefault(payload.job, payload)
        if not latest:
            return None
        study = receipts.path.name.removesuffix(".ndjson")
        return StudyView(study, {rid: RunEntry(job, ts, n, verdicts.get(job.job))
                                 for rid, (job, ts, n) in latest.items()})

    def load(self, study: str) -> StudyView:
        """The study ``study``; StudyError naming the known ones when there is none."""
        if not ID.match(study):
            raise StudyError(f"{study!r} cannot be a study id (letters, digits, '.', '_', '-')")
        view = self.view(study, [])
        if view is None:
            known = ", ".join(self.ids()) or "none yet (mainboard study run FILE)"
            raise StudyError(f"no study {study!r} in {self.directory}; studies: {known}")
        return view
