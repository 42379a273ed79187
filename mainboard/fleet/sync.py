"""Before a run: the workspace mirrored to every fleet host whose workers will evaluate it.

Why: a ``kind = "python"`` integrand module, or a process integrand's script, that lives
in the workspace must be on the host, as it is now, before the first batch reaches a
worker there (workers import it from the host's root, see ``mainboard.tasks.paths``).
The sync is the delta mirror jobs use (:mod:`mainboard.hosts.mirror`): only files changed
since the host's last sync travel, so a run with nothing changed costs one manifest
comparison and no transfer. A host that cannot be synced refuses the run in one line,
before any batch is sent. ``integrate``/``resume``/``clone`` here are the run verbs of
``mainboard.tasks.runner`` with this sync as their ``prepare`` step: what
``mainboard.integrate`` and the CLI call (tasks/ never imports fleet/).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mainboard.config import Config
from mainboard.errors import FleetSyncError, MainboardError, UserError, first_line
from mainboard.fleet.records import read_fleet
from mainboard.receipts import WorkerStarted
from mainboard.tasks import BATCH_QUEUE, runner

if TYPE_CHECKING:  # ssh (paramiko) loads only when a fleet has workers to sync
    from mainboard.fleet.launch import BrokerRoute
    from mainboard.hosts.access import Hosts
    from mainboard.hosts.mirror import Mirror, SyncReport

PARALLEL_HOSTS = 8
log = logging.getLogger("mainboard.fleet")


@dataclass(frozen=True)
class HostSync:
    """One host brought up to date before a run, and how long that took."""

    host: str
    root: str
    report: SyncReport
    seconds: float


def _batch_workers(config: Config) -> list[WorkerStarted]:
    """Fleet workers started, not stopped, consuming the batch queue (receipts only)."""
    return [w for w in read_fleet(config.state_dir).live() if BATCH_QUEUE in w.queues]


def evaluating(config: Config, route: BrokerRoute) -> list[WorkerStarted]:
    """Live fleet workers that consume the batch queue and have not gone silent (a worker
    that never beat yet is still starting: it will take batches too)."""
    import redis

    from mainboard.fleet.status import STALE_AFTER_S
    from mainboard.fleet.workers import allocation_entry, fleet_entries

    live = _batch_workers(config)
    if not live:
        return []
    try:
        entries = fleet_entries(route, live)
    except redis.RedisError:
        entries = {}
    now = time.time()
    beats = {w.worker_id: allocation_entry(entries, w).get("beat") for w in live}
    return [w for w in live if not beats[w.worker_id]
            or now - float(beats[w.worker_id] or 0) <= STALE_AFTER_S]


def _same_place(declared: str, recorded: str) -> bool:
    """The host's root as mainboard.toml spells it names the worker's recorded root."""
    if declared.startswith("~/"):
        return recorded.endswith(declared[1:])
    return os.path.normpath(declared) == os.path.normpath(recorded)


def mirror_of(config: Config, hosts: Hosts, worker: WorkerStarted) -> Mirror:
    """The mirror a worker's host root is synced with: the one jobs share (same manifest)
    when mainboard.toml still names that root, else the root the worker was started in."""
    from mainboard.fleet.launch import ssh_from_dict
    from mainboard.hosts.mirror import Mirror

    if worker.rental and worker.ssh:
        return Mirror(config, worker.host, ssh_from_dict(worker.ssh, worker.host), worker.root,
                      env=config.host(worker.host).env)
    handle = hosts.on(worker.host)
    root = handle.root if _same_place(handle.root, worker.root) else worker.root
    return Mirror(config, worker.host, handle.transport, root, env=handle.config.env)


def _sync_one(config: Config, hosts: Hosts, worker: WorkerStarted) -> HostSync:
    start = time.perf_counter()
    try:
        report = mirror_of(config, hosts, worker).sync()
    except UserError:
        raise  # the workspace itself is wrong (e.g. a file name): exit 2, as for jobs
    except (MainboardError, OSError) as exc:
        raise FleetSyncError(
            f"fleet host {worker.host!r}: cannot sync the workspace into {worker.root} before "
            f"the run ({first_line(exc, 200)}); the run did not start: bring the host back, "
            f"or stop its workers with `mainboard fleet down --on {worker.host}`") from exc
    took = time.perf_counter() - start
    log.info("workspace synced to %s:%s in %.3f s (%d files sent, %d removed)", worker.host,
             report.root, took, len(report.files), len(report.deleted))
    return HostSync(worker.host, report.root, report, took)


def sync_fleet(config: Config, workers: Sequence[WorkerStarted] | None = None
               ) -> list[HostSync]:
    """Mirror the workspace to each host (once per host and root) of ``workers`` (default:
    every evaluating fleet worker), hosts in parallel; FleetSyncError names the first
    host that failed. No fleet (or no broker running) is nothing to do."""
    if workers is None:
        if not _batch_workers(config):  # no fleet: nothing to import, nobody to ask
            return []
        from mainboard.fleet.workers import broker_route

        route = broker_route(config, start=False)
        workers = evaluating(config, route) if route is not None else []
    targets = {(w.host, w.root): w for w in workers}
    if not targets:
        return []
    from mainboard.hosts.access import Hosts

    with Hosts(config=config) as hosts, \
            ThreadPoolExecutor(min(PARALLEL_HOSTS, len(targets))) as pool:
        futures = [pool.submit(_sync_one, config, hosts, w) for w in targets.values()]
        return [f.result() for f in futures]


def standby_pool(config: Config) -> str | None:
    """A declared, autoscaled pool consuming the batch queue that the running keeper will
    grow from zero for a run's batches (none: a run with ``--workers 0`` is refused)."""
    from mainboard.fleet.autoscale import pool_active, pool_paused
    from mainboard.fleet.keeper import keeper_pid

    if keeper_pid(config.state_dir) is None:
        return None
    state = read_fleet(config.state_dir)
    for name, pool in config.fleet.pools.items():
        if pool.autoscaled and (pool.max_jobs or 0) > 0 and BATCH_QUEUE in pool.queues \
                and pool_active(state, name) and not pool_paused(state, name):
            return (f"pool {name!r} (autoscaled, up to {pool.max_jobs} allocation(s) on "
                    f"{pool.host})")
    return None


sync_fleet.standby = standby_pool  # type: ignore[attr-defined]  # read by tasks.runner


def integrate(run: runner.RunLike, workers: int | None = None, *,
              config: Config | None = None, broker_url: str | None = None,
              progress: runner.ProgressFn | None = None, resume: bool = False,
              run_file: str | os.PathLike[str] | None = None) -> runner.RunResult:
    """``mainboard.integrate``: the runner's, with the fleet's hosts synced before the run."""
    return runner.integrate(run, workers, config=config, broker_url=broker_url,
                            progress=progress, resume=resume, prepare=sync_fleet,
                            run_file=None if run_file is None else os.fspath(run_file))


def resume(what: str, workers: int | None = None, **options: Any) -> runner.RunResult:
    """``runs resume``: the runner's, with the fleet's hosts synced first."""
    return runner.resume(what, workers, prepare=sync_fleet, **options)


def clone(what: str, from_iteration: int, workers: int | None = None, **options: Any
          ) -> runner.RunResult:
    """``runs clone``: the runner's, with the fleet's hosts synced first."""
    return runner.clone(what, from_iteration, workers, prepare=sync_fleet, **options)


__all__ = ["HostSync", "clone", "evaluating", "integrate", "mirror_of", "resume", "standby_pool",
           "sync_fleet"]
