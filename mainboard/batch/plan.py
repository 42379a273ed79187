"""Before a batch runs: what each job must ship (``prepare``) and what it will take (``estimate``).

``estimate`` contacts no target. ``prepare`` asks each target once, all at once and within
a few seconds, whether it can be reached (``access``: an unreachable one is a row that says
so, the plan goes on), and asks each target's workspace mirror
what a sync would send now (the same ``Mirror.plan`` a sync uses: files, raw bytes,
bytes on the wire after compression, date of the last sync), adds the job's ``data``
the mirror does not carry (ignored or excluded files travel in an extra tar), and
checks the job against its target's queue policy. ``estimate`` fits each target's
setup time (submitted -> the job began, ``mainboard.jobs.timing``) from this
workspace's own job receipts; a target never timed has 0 samples and no number. When
the job's environment is not built on its target yet, the target's timed builds
(``env.provisioned`` receipts) are added to the setup (``env`` says which case).
Rates come from the provider's offers, or an owned host's declared ``usd_hr`` (0
without one, ``mainboard.hosts.rates``); costs are rate x (setup + runtime_s).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mainboard.batch.run import job_spec
from mainboard.batch.spec import BatchSpec
from mainboard.errors import UserError
from mainboard.hosts.archive import write_archive
from mainboard.hosts.compute import access_of
from mainboard.hosts.mirror import Mirror, load_manifest
from mainboard.hosts.rates import host_rate
from mainboard.jobs.files import data_files
from mainboard.jobs.job import bridge_of
from mainboard.jobs.timing import (
    EnvBuild,
    Setup,
    env_build,
    env_builds,
    fit,
    quantile,
    setup_samples,
    with_env,
)

if TYPE_CHECKING:
    from mainboard.hosts.access import Hosts
    from mainboard.hosts.mirror import Plan

__all__ = ["Estimate", "Prepared", "Setup", "Total", "estimate", "prepare", "quantile",
           "setup_samples", "total"]


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
    access: str = "-"          # the target's access, as `compute` says it ("unreachable: ...")

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["last_sync"] = self.last_sync.isoformat() if self.last_sync else None
        return out


def _extra_data(board: Hosts, plan_files: set[str], data: list[str]) -> tuple[list[str], int, int]:
    """Data files a sync does not carry, their size, and the size of their gzip'd tar."""
    workspace = board.config.root
    extra = [f for f in data_files(workspace, data) if f not in plan_files]
    if not extra:
        return [], 0, 0
    raw = sum((workspace / f).lstat().st_size for f in extra)
    with tempfile.TemporaryFile() as out:
        write_archive(workspace, extra, "gzip", out)
        return extra, raw, out.tell()


def _policy(board: Hosts, target: str, spec: dict[str, object]) -> str:
    handle = board.on(target)
    if handle.config.kind == "provider":
        return "checked when the rental is up (provider hosts have no queues)"
    try:
        bridge_of(handle).prepare(**spec)
    except UserError as exc:
        return f"refused: {exc}"
    return "ok"


def prepare(board: Hosts, spec: BatchSpec) -> list[Prepared]:
    """Per job: the target's access, its mirror plan, extra data, and the queue-policy verdict."""
    reach = access_of(board.config, list(spec.targets))

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
            _policy(board, job.target, job_spec(job, "prepare")), reach[job.target]))
    return out


@dataclass(frozen=True)
class Total:
    """What the whole batch ships: each target's mirror once, plus every job's extra data."""

    jobs: int
    targets: int
    files: int
    raw_bytes: int
    wire_bytes: int


def shipped(row: Prepared) -> tuple[int, int, int]:
    """(files, raw bytes, wire bytes) one job needs sent: its target's mirror and extra data."""
    return (row.files + len(row.extra_files), row.raw_bytes + row.extra_raw_bytes,
            row.wire_bytes + row.extra_wire_bytes)


def total(rows: list[Prepared]) -> Total:
    """The batch's total: a mirror shared by several jobs counts once."""
    mirrors = {r.target: (r.files, r.raw_bytes, r.wire_bytes) for r in rows}
    parts = [*mirrors.values(),
             *((len(r.extra_files), r.extra_raw_bytes, r.extra_wire_bytes) for r in rows)]
    return Total(len(rows), len(mirrors), *(sum(p[i] for p in parts) for i in range(3)))


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
    hardware: str = ""                  # facts summary (owned hosts) or the offer (providers)
    wire_bytes: int | None = None       # what the job needs sent (mirror + extra data)
    env: EnvBuild = EnvBuild("-")       # the environment to build first (included in setup)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def estimate(board: Hosts, spec: BatchSpec) -> list[Estimate]:
    """Per job: setup p50/p90 fitted from recorded dispatches, runtime, rate, costs, bytes."""
    samples = setup_samples(board.config.state_dir)
    builds = env_builds(board.config.state_dir)
    wire = {r.name: shipped(r)[2] for r in prepare(board, spec)}
    rates = {}
    out: list[Estimate] = []
    for job in spec.jobs:
        env = env_build(board.config, job.target, builds)
        setup = with_env(fit(samples.get(job.target, [])), env)
        key = (job.target, job.gpus, job.mem_gb)
        if key not in rates:
            rates[key] = host_rate(board.config, job.target, gpus=job.gpus, mem_gb=job.mem_gb)
        rate = rates[key]
        notes: list[str] = []
        expected = p90 = None
        if rate.usd_hr is not None:
            if job.runtime_s is None:
                notes.append("no runtime_s: cost unknown")
            elif setup.p50_s is None or setup.p90_s is None:
                notes.append(f"setup on {job.target} never timed: cost unknown"
                             if env.state != "to build" or env.build.samples
                             else f"environment build on {job.target} never timed: cost unknown")
            else:
                expected = rate.usd_hr * (setup.p50_s + job.runtime_s) / 3600
                p90 = rate.usd_hr * (setup.p90_s + job.runtime_s) / 3600
        out.append(Estimate(job.name, job.target, board.config.host(job.target).kind, setup,
                            job.runtime_s, rate.usd_hr, rate.source, expected, p90, notes,
                            rate.hardware, wire[job.name], env))
    return out
