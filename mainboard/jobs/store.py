"""Jobs as their receipts tell it: one NDJSON file per job, ``.mainboard/jobs/<id>.ndjson``.

Nothing about a job lives in memory between calls: every reader (``Job``, ``mainboard
jobs``, the monitor, a batch) replays the job's lines, so a new process sees exactly
what an old one recorded. Writers that might race (a ``wait`` here, a cron'd monitor
there) record a state change under one lock that re-reads the file first, so each
change is one line and the verdict (``job.finished``) is written once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mainboard.bridges.base import JobRecord
from mainboard.bridges.jobspec import JobSpec
from mainboard.bridges.jobstate import JobState, JobStatus
from mainboard.errors import AmbiguousJob, ReceiptError, UnknownJob
from mainboard.ids import IdForm
from mainboard.receipts import (
    JobCost,
    JobFinished,
    JobPulled,
    JobStateChanged,
    JobSubmitted,
    Payload,
    Receipts,
)
from mainboard.store import ReceiptStore

if TYPE_CHECKING:
    from mainboard.bridges.base import JobRecord

SUFFIX = ".ndjson"


FORM = IdForm("job", "jobs", "20250101-120000-name-1a2b3c", "mainboard jobs list", UnknownJob)


@dataclass(frozen=True)
class JobView:
    """One job replayed from its receipts: what was asked, the last state seen, the verdict."""

    submitted: JobSubmitted
    state: JobState = JobState.PENDING
    exit_code: int | None = None
    native: str = ""
    reason: str = ""
    finished: bool = False        # a job.finished line (the verdict) exists
    pulled: JobPulled | None = None
    file: Path | None = None
    since: float = 0.0            # when the line that set ``state`` was written (epoch s)
    running_since: float | None = None  # first seen running, or the script's own start stamp
    ended_at: float | None = None       # its end stamp, else when the verdict was written
    cost: JobCost | None = None         # the last cost observation (its rate is the job's)
    stamped: bool = False               # ended with the script's start and end stamps

    def run_seconds(self, now: float) -> float:
        """How long the job has run by ``now`` (or in all, once ended): its script's own
        start and end stamps (one clock) when its verdict carries both, else from its start
        (hosts without a scheduler start it at submit) to its verdict or ``now``."""
        if self.stamped and self.running_since is not None and self.ended_at is not None:
            return max(0.0, self.ended_at - self.running_since)
        began = self.running_since if self.scheduler_id else self.submitted.submitted_at
        if began is None:
            return 0.0  # queued, never seen running
        return max(0.0, (self.ended_at if self.ended_at is not None else now) - began)

    def cost_at(self, now: float, at: str) -> JobCost | None:
        """A cost observation at ``now`` with the rate recorded at submit; None for jobs
        submitted before costs were recorded (no rate to go on)."""
        if self.cost is None:
            return None
        seconds = round(self.run_seconds(now), 3)
        rate = self.cost.usd_hr
        return JobCost(id=self.id, usd_hr=rate, source=self.cost.source, seconds=seconds,
                       usd=None if rate is None else round(rate * seconds / 3600, 6), at=at)

    @property
    def id(self) -> str:
        """mainboard's id of the job (unique across hosts)."""
        return self.submitted.id

    @property
    def host(self) -> str:
        """The declared host it was submitted to."""
        return self.submitted.host

    @property
    def name(self) -> str:
        """The name it was given (verbatim; schedulers see a sanitised copy)."""
        return self.submitted.name

    @property
    def scheduler_id(self) -> str | None:
        """The id SLURM's ``squeue`` or PBS's ``qstat`` lists; None on hosts without a scheduler
        (their ``job_id`` is mainboard's own id)."""
        job_id = self.submitted.job_id
        return job_id if job_id != self.submitted.id else None

    @property
    def shown_id(self) -> str:
        """The id ``submit`` prints: the scheduler's where there is one, else mainboard's."""
        return self.scheduler_id or self.id

    @property
    def status(self) -> JobStatus:
        """The recorded state as the bridges' status record."""
        return JobStatus(self.state, self.native, self.exit_code, self.reason)

    def record(self) -> JobRecord:
        """The bridge's record of this job, rebuilt from the receipt (for poll/cancel/logs)."""
        s = self.submitted
        return JobRecord(job_id=s.job_id, uid=s.id, host=s.host, kind=s.kind, name=s.name,
                         job_dir=s.job_dir, submitted_at=s.submitted_at,
                         spec=JobSpec.model_validate(s.spec))

    def as_json(self) -> dict[str, Any]:
        """What ``jobs list/show --json`` print for this job."""
        s = self.submitted
        return {"id": s.id, "name": s.name, "host": s.host, "kind": s.kind, "job_id": s.job_id,
                "state": self.state.value, "final": self.finished, "exit_code": self.exit_code,
                "reason": self.reason, "native": self.native, "submitted_at": s.submitted_at,
                "job_dir": s.job_dir, "root": s.root, "spec": s.spec, "data": s.data,
                "fetch": s.fetch,
                "pulled": None if self.pulled is None else self.pulled.model_dump(mode="json"),
                "cost": None if self.cost is None else self.cost.model_dump(mode="json")}


def replay(payloads: Iterator[tuple[float, Payload]], file: Path) -> JobView | None:
    """Fold one job's timed payloads into a view; None when its ``job.submitted`` line is missing."""
    view: JobView | None = None
    for ts, payload in payloads:
        if isinstance(payload, JobSubmitted):
            view = JobView(submitted=payload, file=file, since=ts)
        elif view is None:
            continue
        elif isinstance(payload, JobFinished) and not view.finished:
            stamped = payload.started_at is not None and payload.ended_at is not None
            view = replace(view, state=JobState(payload.state), exit_code=payload.exit_code,
                           native=payload.native, reason=payload.reason, finished=True,
                           since=ts, ended_at=payload.ended_at if stamped else ts,
                           running_since=payload.started_at or view.running_since,
                           stamped=stamped)
        elif isinstance(payload, JobStateChanged) and not view.finished:
            began = view.running_since
            if began is None and payload.state == JobState.RUNNING.value:
                began = ts
            view = replace(view, state=JobState(payload.state), exit_code=None,
                           native=payload.native, reason=payload.reason, since=ts,
                           running_since=began)
        elif isinstance(payload, JobPulled):
            view = replace(view, pulled=payload)
        elif isinstance(payload, JobCost):
            view = replace(view, cost=payload)
    return view


class JobStore(ReceiptStore[JobView]):
    """The job receipts of one workspace state directory (``.mainboard/jobs/<id>.ndjson``)."""

    FOLDER, LAYOUT, FIRST, FORM = "jobs", "{id}" + SUFFIX, "job.submitted", FORM

    def fold(self, receipts: Receipts, errors: list[ReceiptError] | None) -> JobView | None:
        return replay(receipts.read_timed(errors=errors), receipts.path)

    def resolve(self, ref: str) -> str:
        """mainboard's id that ``ref`` names: that id, the scheduler's id of one job (what
        ``squeue``/``qstat`` list), or a unique suffix of mainboard's id.

        One scheduler id on two hosts (two clusters count jobs alike) is refused with
        the candidates named; a ref matching nothing is UnknownJob.
        """
        self.check(ref)
        ids = self.ids()
        if ref in ids:
            return ref
        owners = self.by_scheduler_id(ref, ids)
        if len(owners) > 1:
            named = ", ".join(f"{v.id} on {v.host}" for v in owners)
            raise AmbiguousJob(f"{ref!r} is the scheduler id of {len(owners)} jobs ({named}); "
                               "give mainboard's id instead")
        if owners:
            return owners[0].id
        return FORM.resolve(ref, ids, self.directory)

    def by_scheduler_id(self, ref: str, ids: list[str] | None = None) -> list[JobView]:
        """Every job whose scheduler gave it the id ``ref`` (unreadable logs are passed over)."""
        found = []
        for job_id in self.ids() if ids is None else ids:
            first = self.receipts(job_id).first()  # job.submitted: one line per job read
            if isinstance(first, JobSubmitted) and first.job_id == ref and first.job_id != first.id:
                found.append(JobView(submitted=first))
        return found

    def file(self, job_id: str) -> Path:
        """The receipts file of ``job_id`` (refusing ids that are not plain names)."""
        return self.path(job_id)

    def load(self, ref: str) -> JobView:
        """The view of the job ``ref`` names; UnknownJob when none, ReceiptError when unreadable."""
        job_id = self.resolve(ref)
        view = self.view(job_id)
        if view is None:
            raise self.missing(job_id, "the job cannot be found on its host without it")
        return view

    def scan(self, skipped: str = "job skipped") -> tuple[list[JobView], list[ReceiptError]]:
        """Every job (oldest first) and every unreadable line met on the way (file:line)."""
        return super().scan(skipped)

    def submitted(self, payload: JobSubmitted) -> None:
        """Record a job the host accepted (its first line)."""
        self.append(payload.id, payload)

    def observe(self, job_id: str, status: JobStatus) -> bool:
        """Record ``status`` if it is news: a new state, or the verdict. True when a line was added.

        After the verdict nothing changes any more: a later, different report (a scheduler
        that forgot the job) is not allowed to rewrite an outcome already recorded.
        """
        with self.lock():
            view = self.view(job_id, [])
            if view is None or view.finished:
                return False
            if status.final:
                self.append(job_id, JobFinished(
                    id=job_id, state=status.state.value, exit_code=status.exit_code,
                    native=status.native, reason=status.reason, started_at=status.started_at,
                    ended_at=status.ended_at))
                self.record_cost(job_id, "end")
                return True
            if status.state is view.state:
                return False
            self.append(job_id, JobStateChanged(
                id=job_id, state=status.state.value, native=status.native, reason=status.reason))
            return True

    def record_cost(self, job_id: str, at: str, now: float | None = None) -> JobCost | None:
        """Append what the job has cost by ``now`` (``at``: "pass" or "end") if it is news:
        the end once, a pass only when the run time grew. The line written, else None."""
        view = self.view(job_id, [])
        if view is None or view.cost is None or view.cost.at == "end":
            return None
        line = view.cost_at(time.time() if now is None else now, at)
        if line is None or (at != "end" and line.seconds <= view.cost.seconds):
            return None
        self.append(job_id, line)
        return line

    def pulled(self, payload: JobPulled) -> None:
        """Record that a job's results came back."""
        self.append(payload.id, payload)
