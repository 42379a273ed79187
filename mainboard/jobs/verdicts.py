"""Study verdicts: the monitor writes each study job's outcome into its study's ledger, once.

A study job's environment names its study and run id (``MAINBOARD_STUDY``,
``MAINBOARD_RUN_ID``, recorded in its own ``job.submitted`` line), so the monitor needs
nothing from the study room above it: it reads the jobs' receipts and appends a
``study.verdict`` line to ``.mainboard/studies/<study>.ndjson`` for every study job with
an outcome the ledger does not hold yet. It runs under the monitor's lock and re-reads
the ledger each pass, so a verdict is written exactly once, even across crashed passes.
Verdicts: completed; failed (a non-zero exit code, or killed at its walltime); cancelled;
lost (preempted, or the host no longer knows the job and it left no exit code).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mainboard.bridges.jobstate import JobState
from mainboard.errors import ReceiptError
from mainboard.ids import ID
from mainboard.jobs.store import JobView
from mainboard.receipts import Receipts, StudyVerdict
from mainboard.statedir import RUN_ID_ENV, STUDY_ENV, study_ledger

VERDICTS = {JobState.COMPLETED: "completed", JobState.FAILED: "failed",
            JobState.TIMEOUT: "failed", JobState.CANCELLED: "cancelled",
            JobState.PREEMPTED: "lost", JobState.UNKNOWN: "lost"}


def verdict_of(view: JobView) -> str | None:
    """The study verdict of a job, or None while it may still run."""
    if view.finished or view.state is JobState.UNKNOWN:
        return VERDICTS.get(view.state)
    return None


def study_of(view: JobView) -> tuple[str, str] | None:
    """(study, run id) a job was submitted under, or None (not a study job, or ids unusable)."""
    env = view.submitted.spec.get("env") or {}
    study, run_id = env.get(STUDY_ENV), env.get(RUN_ID_ENV)
    if isinstance(study, str) and isinstance(run_id, str) and ID.match(study) \
            and ID.match(run_id):
        return study, run_id
    return None


def record_verdicts(state_dir: Path, views: Iterable[JobView]) -> list[str]:
    """Append the verdicts the study ledgers lack; returns unreadable ledger lines."""
    owed: dict[str, list[tuple[str, JobView, str]]] = {}
    for view in views:
        found, verdict = study_of(view), verdict_of(view)
        if found is not None and verdict is not None:
            owed.setdefault(found[0], []).append((found[1], view, verdict))
    problems: list[ReceiptError] = []
    for study, items in owed.items():
        ledger = Receipts(study_ledger(state_dir, study))
        written = {p.job for p in ledger.read(StudyVerdict.topic, errors=problems)
                   if isinstance(p, StudyVerdict)}
        for run_id, view, verdict in items:
            if view.id not in written:
                ledger.append(StudyVerdict(study=study, run_id=run_id, job=view.id,
                                           verdict=verdict, state=view.state.value,
                                           exit_code=view.exit_code, reason=view.reason))
    return [str(p) for p in problems]
