"""What a job directory says about its job, and how that corrects a scheduler's word.

Why apart from the base class: the job script records its exit code, cancel and timeout
markers and its ``started``/``ended`` stamps in its directory, so an outcome survives the
scheduler forgetting the job; reading that record (``parse_facts``) and merging it with
what a scheduler said (``merge``) is the same for every host kind.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .jobstate import JobState, JobStatus


@dataclass(frozen=True)
class DirFacts:
    """What a job directory says: the script's exit code, markers, and (local/ssh) the pid."""

    present: bool
    exit_code: int | None = None
    cancelled: bool = False
    timeout: bool = False
    pid: int | None = None
    alive: bool = False
    started_at: float | None = None  # the script's own stamp (epoch seconds on the host)
    ended_at: float | None = None    # its end stamp, written just before its exit code


def parse_facts(line: str) -> DirFacts:
    if line == "missing":
        return DirFacts(present=False)
    exit_text, cancelled, timeout, pid, alive, started, ended = (line.split("|") + [""] * 2)[:7]
    exit_code = int(exit_text) if exit_text.strip().lstrip("-").isdigit() else None
    return DirFacts(present=True, exit_code=exit_code, cancelled=cancelled == "1",
                    timeout=timeout == "1", pid=int(pid) if pid.isdigit() else None,
                    alive=alive == "1", started_at=_stamp(started), ended_at=_stamp(ended))


def _stamp(text: str) -> float | None:
    """A ``started``/``ended`` stamp (``$EPOCHREALTIME``, a comma in some locales, or
    ``date +%s``)."""
    try:
        value = float(text.strip().replace(",", "."))
    except ValueError:
        return None
    return value if value > 0 else None


def merge(native: JobStatus, facts: DirFacts) -> JobStatus:
    """The scheduler's final (or unknown) word corrected by what the job directory recorded.

    The scheduler's TIMEOUT/PREEMPTED/CANCELLED stand (it knows why it stopped the job:
    the script then records 143 from the TERM it passed on); otherwise a cancel marker
    means CANCELLED and the recorded exit code decides completed/failed. The script's
    ``started`` and ``ended`` stamps ride along, so a job that ended between two polls is
    still timed (and costed) by its own clock.
    """
    if not facts.present:
        return native
    return dataclasses.replace(_corrected(native, facts), started_at=facts.started_at,
                               ended_at=facts.ended_at)


def _corrected(native: JobStatus, facts: DirFacts) -> JobStatus:
    if native.state in (JobState.TIMEOUT, JobState.PREEMPTED, JobState.CANCELLED):
        return JobStatus(native.state, native.native,
                         facts.exit_code if facts.exit_code is not None else native.exit_code,
                         native.reason)
    if facts.cancelled:
        return JobStatus(JobState.CANCELLED, native.native, facts.exit_code, "cancelled")
    if facts.exit_code is None:
        return native
    state = JobState.COMPLETED if facts.exit_code == 0 else JobState.FAILED
    return JobStatus(state, native.native, facts.exit_code, native.reason)
