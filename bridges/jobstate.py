"""One job-state vocabulary for every host kind, and the small status record bridges return.

Schedulers each speak their own dialect (SLURM ``COMPLETING``, PBS ``E``, a local pid
that vanished); every bridge translates its native word through one table into
``JobState`` so fleet, jobs and monitor code never branch on the host kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class JobState(StrEnum):
    """Where a job is in its life, the same on every host kind."""

    PENDING = "pending"      # accepted, not started (queued, held, suspended, requeued)
    RUNNING = "running"      # started and not yet finished (incl. completing/exiting)
    COMPLETED = "completed"  # finished with exit code 0
    FAILED = "failed"        # finished with a non-zero exit code, or could not run
    CANCELLED = "cancelled"  # stopped on request (scancel, qdel, Bridge.cancel)
    TIMEOUT = "timeout"      # killed because it reached its walltime (or deadline)
    PREEMPTED = "preempted"  # taken away through no fault of its own (preemption, node failure)
    UNKNOWN = "unknown"      # the host no longer knows the job and left no outcome

    @property
    def final(self) -> bool:
        """True when the job will not change state by itself any more."""
        return self in _FINAL


_FINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED,
                    JobState.TIMEOUT, JobState.PREEMPTED})


def is_final(state: JobState, requeue: bool = False) -> bool:
    """Final for this caller: a worker that should be requeued treats PREEMPTED as not final.

    SLURM's NODE_FAIL translates to PREEMPTED for that reason: the job was lost to the
    machine, not to its own code, so a long-lived worker is submitted again.
    """
    if requeue and state is JobState.PREEMPTED:
        return False
    return state.final


def translate(native: str, table: Mapping[str, JobState]) -> JobState:
    """A native state word through a bridge's table; words it has never seen are UNKNOWN."""
    return table.get(native.strip().upper(), JobState.UNKNOWN)


@dataclass(frozen=True)
class JobStatus:
    """One job's state with what the host said about it (native word, exit code, why)."""

    state: JobState
    native: str = ""
    exit_code: int | None = None
    reason: str = ""
    started_at: float | None = None  # when the job's script began, if it left a stamp
    ended_at: float | None = None    # when it ended, by the same clock, if it left a stamp

    @property
    def final(self) -> bool:
        """Shortcut for ``self.state.final``."""
        return self.state.final

    def describe(self) -> str:
        """``failed (exit code 3; FAILED)`` for listings and messages."""
        details = []
        if self.exit_code is not None:
            details.append(f"exit code {self.exit_code}")
        if self.reason:
            details.append(self.reason)
        if self.native:
            details.append(self.native)
        return f"{self.state.value} ({'; '.join(details)})" if details else self.state.value
