"""Before a batch runs: what each job must ship (``prepare``) and what it will take (``estimate``).

Nothing here contacts a job's target. ``prepare`` asks each target's workspace mirror
what a sync would send now (the same ``Mirror.plan`` a sync uses: files, raw bytes,
bytes on the wire after compression, date of the last sync), adds the job's ``data``
the mirror does not carry (ignored or excluded files travel in an extra tar), and
checks the job against its target's queue policy. ``estimate`` fits each target's
setup time (submitted -> first seen running) from this workspace's own job receipts;
a target never timed has 0 samples and no number. Rates come from the provider's
offers (provider targets only); costs are rate x (setup + runtime_s).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mainboard.batch.run import job_spec
from mainboard.batch.spec import BatchSpec
from mainboard.config import ProviderHost
from mainboard.errors import MainboardError, UserError, first_line
from mainboard.jobs.store import JobStore
from mainboard.receipts import JobStateChanged, JobSubmitted

if TYPE_CHECKING:
    from mainboard.hosts.access import Hosts
    from mainboard.hosts.mirror import Plan

__all__ = ["Estimate", "Prepared", "Setup", "estimate", "prepare", "quantile", "setup_samples"]


@dataclass(frozen=True)
class Prepared:
    """What one job needs shipped before it can run on its target."""

    name: str
    target: str
    kind: str
    files: int                 # mirror: files a sync of the target would send now
    raw_bytes: int
    wire_bytes: int            # after compression (``codec``)
    codec: str
    last_sync: datetime | None
    in_place: bool             # the target's root is the workspace: nothing travels
    shared_by: int             # jobs on this target (the mirror ships once for all of them)
    data: list[str]
    extra_files: list[str]     # data the mirror does not carry (ignored/excluded): extra tar
    extra_raw_bytes: int
    extra_wire_bytes: int
    policy: str                # "ok", the refusal, or why it is checked at dispatch

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["last_sync"] = self.last_sync.isoformat() if self.last_sync else None
        return out


def _extra_data(board: Hosts, plan_files: set[str], data: list[str]) -> tuple[list[str], int, int]:
    """Data files a sync does not carry, their size, and the size of their gzip'd tar."""
    from mainboard.hosts.archive import write_archive
    from mainboard.jobs.files import data_files

    workspace = board.config.root
    extra = [f for f in data_files(workspace, data) if f not in plan_files]
    if not extra:
        return [], 0, 0
    raw = sum((workspace / f).lstat().st_size for f in extra)
    with tempfile.TemporaryFile() as out:
        write_archive(workspace, extra, "gzip", out)
        return extra, raw, out.tell()


def _policy(board: Hosts, target: str, spec: dict[str, object]) -> str:
    from mainboard.jobs.job import bridge_of

    handle = board.on(target)
    if handle.config.kind == "provider":
        return "checked when the rental is up (provider hosts have no queues)"
    try:
        bridge_of(handle).prepare(**spec)
    except UserError as exc:
        return f"refused: {exc}"
    return "ok"


def prepare(board: Hosts, spec: BatchSpec) -> list[Prepared]:
    """Per job: the target's mirror plan, extra data, and the queue-policy verdict."""
    from mainboard.hosts.mirror import Mirror, load_manifest

    plans: dict[str, tuple[Plan, set[str]]] = {}
    for target in spec.targets:
        mirror = Mirror.of(board.on(target))
        plan = mirror.plan()
        carried = set() if plan.in_place else set(mirror.changes(
            load_manifest(mirror.manifest_file, mirror.host, mirror.root)).current)
        plans[target] = (plan, carried)
    counts = {t: sum(1 for j in spec.jobs if j.target == t) for t in spec.targets}
    out: list[Prepared] = []
    for job in spec.jobs:
        plan, carried = plans[job.target]
        extra, extra_raw, extra_wire = ([], 0, 0) if plan.in_place else \
            _extra_data(board, carried, job.data)
        out.append(Prepared(
            job.name, job.target, board.on(job.target).config.kind, len(plan.files),
            plan.raw_bytes, plan.wire_bytes, plan.codec, plan.last_sync, plan.in_place,
            counts[job.target], list(job.data), extra, extra_raw, extra_wire,
            _policy(board, job.target, job_spec(job, "prepare"))))
    return out


# -- estimate --------------------------------------------------------------------------------

def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def setup_samples(board: Hosts) -> dict[str, list[float]]:
    """Per host, seconds from ``job.submitted`` to the first line saying the job ran.

    Only jobs seen running count: a job first seen already finished has no start time,
    and guessing one would invent a number.
    """
    store = JobStore(board.config.state_dir)
    samples: dict[str, list[float]] = {}
    for job_id in store.ids():
        submitted: JobSubmitted | None = None
        for ts, payload in store.receipts(job_id).read_timed(errors=[]):
            if isinstance(payload, JobSubmitted):
                submitted = payload
            elif (submitted is not None and isinstance(payload, JobStateChanged)
                  and payload.state == "running"):
                samples.setdefault(submitted.host, []).append(max(0.0, ts - submitted.submitted_at))
                break
    return samples


@dataclass(frozen=True)
class Setup:
    """A target's setup time as this workspace measured it."""

    samples: int
    p50_s: float | None = None
    p90_s: float | None = None


@dataclass(frozen=True)
class Estimate:
    """One job: setup, runtime, rate, and the costs they imply (None where unknown)."""

    name: str
    target: str
    kind: str
    setup: Setup
    runtime_s: int | None
    usd_hr: float | None
    rate: str                  # where the rate came from, or why there is none
    expected_usd: float | None = None   # rate x (setup p50 + runtime)
    p90_usd: float | None = None        # rate x (setup p90 + runtime)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _rate(board: Hosts, target: str) -> tuple[float | None, str]:
    """The cheapest matching offer's USD/h for a provider target, else (None, why not)."""
    host = board.config.host(target)
    if not isinstance(host, ProviderHost):
        return None, f"{host.kind} host: no hourly rate"
    from mainboard.bridges.providers import adapter_for

    provider = board.config.providers.get(host.provider)
    try:
        if provider is None:
            raise UserError(f"provider {host.provider!r} is not declared")
        offer = adapter_for(host.provider, provider).cheapest(host.gpu, host.max_usd_hr)
    except (MainboardError, OSError) as exc:
        return None, f"no rate: {first_line(exc)}"
    return offer.usd_hr, (f"{host.provider} offer {offer.id}: {offer.gpu_count}x {offer.gpu} "
                          "(cheapest matching now)")


def estimate(board: Hosts, spec: BatchSpec) -> list[Estimate]:
    """Per job: setup p50/p90 fitted from recorded dispatches, runtime, rate and costs."""
    samples = setup_samples(board)
    rates = {t: _rate(board, t) for t in spec.targets}
    out: list[Estimate] = []
    for job in spec.jobs:
        timed = samples.get(job.target, [])
        setup = Setup(len(timed), quantile(timed, 0.5), quantile(timed, 0.9)) if timed \
            else Setup(0)
        usd_hr, rate = rates[job.target]
        notes: list[str] = []
        expected = p90 = None
        if usd_hr is not None:
            if job.runtime_s is None:
                notes.append("no runtime_s: cost unknown")
            elif setup.p50_s is None or setup.p90_s is None:
                notes.append(f"setup on {job.target} never timed: cost unknown")
            else:
                expected = usd_hr * (setup.p50_s + job.runtime_s) / 3600
                p90 = usd_hr * (setup.p90_s + job.runtime_s) / 3600
        out.append(Estimate(job.name, job.target, board.config.host(job.target).kind, setup,
                            job.runtime_s, usd_hr, rate, expected, p90, notes))
    return out
