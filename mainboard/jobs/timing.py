"""How long a host takes to start a job, as this workspace's own job receipts measured it.

Setup is ``job.submitted`` -> the job began: the first ``job.state running`` line when a
poll saw the job running (this machine's clock), else the ``started_at`` stamp the job
script left and the verdict carries (the host's clock), so a job that finished before
the first monitor pass is timed too. A job with neither (a script from before stamps, or
one that never started) is not counted: guessing would invent a number. Batch estimates
and the router both read these fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from mainboard.jobs.store import JobStore
from mainboard.receipts import JobFinished, JobStateChanged, JobSubmitted

__all__ = ["Setup", "fit", "quantile", "setup_samples"]


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _setup_of(store: JobStore, job_id: str) -> tuple[str, float] | None:
    """(host, seconds from submit to start) of one job, or None when it was never timed."""
    submitted: JobSubmitted | None = None
    for ts, payload in store.receipts(job_id).read_timed(errors=[]):
        if isinstance(payload, JobSubmitted):
            submitted = payload
        elif submitted is None:
            continue
        elif isinstance(payload, JobStateChanged) and payload.state == "running":
            return submitted.host, max(0.0, ts - submitted.submitted_at)
        elif isinstance(payload, JobFinished):
            if payload.started_at is None:
                return None
            return submitted.host, max(0.0, payload.started_at - submitted.submitted_at)
    return None


def setup_samples(state_dir: Path) -> dict[str, list[float]]:
    """Per host, the setup seconds of every timed job of the workspace (oldest first)."""
    store = JobStore(state_dir)
    samples: dict[str, list[float]] = {}
    for job_id in store.ids():
        found = _setup_of(store, job_id)
        if found is not None:
            samples.setdefault(found[0], []).append(found[1])
    return samples


@dataclass(frozen=True)
class Setup:
    """A target's setup time as this workspace measured it (no numbers without samples)."""

    samples: int
    p50_s: float | None = None
    p90_s: float | None = None


def fit(samples: list[float]) -> Setup:
    """p50 and p90 of ``samples``; ``Setup(0)`` (no estimate) when there are none."""
    if not samples:
        return Setup(0)
    return Setup(len(samples), quantile(samples, 0.5), quantile(samples, 0.9))
