"""``study run``: submit each run of a study that has not run yet; never one twice by accident.

For each job, its run id (``mainboard.study.spec``) is looked up in the study's ledger:
a run completed or still in flight is skipped; a run whose last job failed, was lost
or cancelled is submitted again (its next ``attempt``, so ``[hosts.X.defaults]``
expressions of ``attempt`` apply). Queue policies are checked for every job first (a
refusal starts nothing). Each job's environment names its study and run id, so a run
interrupted between "the host accepted it" and "the ledger recorded it" is adopted from
the job's own receipts the next time, not sent again; one ``study run`` per study runs
at a time (a lock). A target that cannot be reached fails only its own jobs. As in
``batch run``, each target's environment (pins, ``[python.deps]``) is prepared once, at
its first job to submit, and handed to every job of that target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mainboard.batch.run import check_policies
from mainboard.errors import MainboardError, first_line
from mainboard.jobs.environment import JobEnvironment, prepare_environment
from mainboard.jobs.job import bridge_of, rental_lease, submit
from mainboard.jobs.store import JobStore
from mainboard.jobs.verdicts import study_of
from mainboard.receipts import StudyJob
from mainboard.statedir import RUN_ID_ENV, STUDY_ENV
from mainboard.study.ledger import RETRIED, StudyStore, StudyView
from mainboard.study.spec import Run, Study, load_study, param_env

if TYPE_CHECKING:
    from mainboard.hosts.access import Hosts

__all__ = ["Outcome", "run_study"]

LOCK_WAIT_S = 60.0


@dataclass(frozen=True)
class Outcome:
    """What ``study run`` did with one job: submitted, adopted, skipped, or failed to submit."""

    name: str
    run_id: str
    target: str
    action: str
    job: str | None = None
    why: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line for stderr."""
        job = f" as job {self.job}" if self.job else ""
        why = f": {self.why}" if self.why else ""
        return f"{self.action} {self.name} ({self.run_id}) on {self.target}{job}{why}"


def _in_receipts(board: Hosts, study: str) -> dict[str, str]:
    """Run id -> the latest job the jobs' own receipts say was submitted for this study."""
    views, _ = JobStore(board.config.state_dir).scan()
    found: dict[str, str] = {}
    for view in views:
        tagged = study_of(view)
        if tagged is not None and tagged[0] == study:
            found[tagged[1]] = view.id
    return found


class _Environments:
    """Each target's environment, prepared at its first submit and reused (a failure too:
    the target's other jobs fail with the same line, without asking the host again)."""

    def __init__(self, board: Hosts) -> None:
        self.board = board
        self.ready: dict[str, JobEnvironment | MainboardError] = {}

    def of(self, target: str) -> JobEnvironment:
        if target not in self.ready:
            handle = self.board.on(target)
            try:
                self.ready[target] = prepare_environment(handle, bridge_of(handle))
            except MainboardError as exc:
                self.ready[target] = exc
        found = self.ready[target]
        if isinstance(found, MainboardError):
            raise found
        return found


def _submit(board: Hosts, study: Study, run: Run, attempt: int,
            environments: _Environments) -> str:

    job = run.job
    env = {**job.env, **param_env(job.params), STUDY_ENV: study.id, RUN_ID_ENV: run.run_id}
    with rental_lease(board.on(job.target)):  # preparing the env may choose the rental
        sent = submit(board, job.target, job.command, name=job.name, walltime=job.walltime,
                      mem_gb=job.mem_gb, cpus=job.cpus, gpus=job.gpus, queue=job.queue,
                      attempt=attempt, data=job.data, fetch=job.fetch, env=env,
                      environment=environments.of(job.target))
    return sent.id


def _decide(view: StudyView, seen: dict[str, str], run: Run) -> tuple[str, str, int]:
    """(action, why, attempt) for one run: skip, adopt or submit."""
    entry = view.runs.get(run.run_id)
    if entry is None:
        if run.run_id in seen:
            return "adopted", "found submitted by an interrupted study run", 1
        return "submitted", "", 1
    if entry.verdict is None:
        return "skipped", f"in flight as job {entry.submitted.job}", entry.attempts
    if entry.verdict.verdict in RETRIED:
        return "submitted", (f"attempt {entry.attempts + 1}: last job {entry.submitted.job} "
                             f"{entry.verdict.verdict}"), entry.attempts + 1
    return "skipped", f"completed as job {entry.submitted.job}", entry.attempts


def run_study(board: Hosts, path: str | Path,
              on_event: Callable[[Outcome], None] | None = None) -> tuple[Study, list[Outcome]]:
    """Load, check and submit a study; one Outcome per job, in file order."""
    study = load_study(path, board.config)
    check_policies(board, study.spec)
    store = StudyStore(board.config.state_dir)
    out: list[Outcome] = []
    with store.lock(f".{study.id}.lock", LOCK_WAIT_S) as held:
        if not held:
            raise MainboardError(f"study {study.id}: another `study run` has held its lock for "
                                 f"{LOCK_WAIT_S:g}s; try again when it is done")
        seen = _in_receipts(board, study.id)
        environments = _Environments(board)
        for run in study.runs:
            job = run.job
            action, why, attempt = _decide(store.view(study.id, []) or StudyView(study.id),
                                           seen, run)
            job_id: str | None = seen.get(run.run_id) if action == "adopted" else None
            if action == "submitted":
                try:
                    job_id = _submit(board, study, run, attempt, environments)
                except MainboardError as exc:
                    action, why = "failed", first_line(exc)
            if action in ("submitted", "adopted") and job_id is not None:
                store.append(study.id, StudyJob(
                    study=study.id, run_id=run.run_id, name=job.name, target=job.target,
                    job=job_id, params=job.params, inputs=run.inputs,
                    adopted=action == "adopted"))
            outcome = Outcome(job.name, run.run_id, job.target, action, job_id, why)
            out.append(outcome)
            if on_event is not None:
                on_event(outcome)
    return study, out
