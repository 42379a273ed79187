"""How long a host takes to start a job, as this workspace's own job receipts measured it.

Setup is ``job.submitted`` -> the job began: the first ``job.state running`` line when a
poll saw the job running (this machine's clock), else the ``started_at`` stamp the job
script left and the verdict carries (the host's clock), so a job that finished before
the first monitor pass is timed too. A job with neither (a script from before stamps, or
one that never started) is not counted: guessing would invent a number. Batch estimates
and the router both read these fits.

A job whose environment (``[python.deps]``, see ``mainboard.jobs.environment``) is not
built on its target yet waits for that build first: ``env_build`` says so when no
``env.provisioned`` receipt of that host carries the job's manifest digest (a rental
starts empty: always), with p50/p90 of the host's timed builds, and ``with_env`` adds
them to the setup (no number when either part was never timed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mainboard.bridges.provision import env_receipts, manifest_digest
from mainboard.jobs.store import JobStore
from mainboard.receipts import EnvProvisioned, JobFinished, JobStateChanged, JobSubmitted

if TYPE_CHECKING:
    from mainboard.config import Config

__all__ = ["EnvBuild", "Setup", "env_build", "env_builds", "fit", "quantile", "setup_samples",
           "with_env"]


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


NO_ENV, BUILT, TO_BUILD = "-", "built", "to build"


@dataclass(frozen=True)
class EnvBuild:
    """Whether a job's environment must be built on its target first, and how long the
    target's builds took (``state``: ``-`` nothing to build, ``built``, ``to build``)."""

    state: str
    build: Setup = Setup(0)


def env_builds(state_dir: Path) -> list[EnvProvisioned]:
    """Every environment build this workspace timed (``.mainboard/envs.ndjson``)."""
    lines = env_receipts(state_dir).read(EnvProvisioned.topic)
    return [line for line in lines if isinstance(line, EnvProvisioned)]


def env_build(config: Config, name: str, builds: list[EnvProvisioned]) -> EnvBuild:
    """What a job on host ``name`` waits for before it starts: nothing, or its env's build."""
    kind = config.host(name).kind
    if kind == "local" or not config.python.deps:
        return EnvBuild(NO_ENV)  # local jobs run in this interpreter's environment
    mine = [b for b in builds if b.host == name]
    digest = manifest_digest(config, name)
    if kind != "provider" and any(b.manifest == digest for b in mine):
        return EnvBuild(BUILT)
    return EnvBuild(TO_BUILD, fit([b.seconds for b in mine]))


def with_env(setup: Setup, env: EnvBuild) -> Setup:
    """``setup`` plus the environment's build when there is one to wait for."""
    if env.state != TO_BUILD:
        return setup
    if setup.p50_s is None or setup.p90_s is None or env.build.p50_s is None \
            or env.build.p90_s is None:
        return Setup(setup.samples)
    return Setup(setup.samples, setup.p50_s + env.build.p50_s, setup.p90_s + env.build.p90_s)
