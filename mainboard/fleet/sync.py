"""Before a run: the workspace mirrored to every fleet host whose workers will evaluate it.

Why: a ``kind = "python"`` integrand module, or a process integrand's script, that lives
in the workspace must be on the host, as it is now, before the first batch reaches a
worker there (workers import it from the host's root, see ``mainboard.tasks.paths``).
The sync is the delta mirror jobs use (:mod:`mainboard.hosts.mirror`): only files changed
since the host's last sync travel, so a run with nothing changed costs one manifest
comparison and no transfer. A host that cannot be synced refuses the run in one line,
before any batch is sent. The run verbs of ``mainboard.tasks.runner`` reach it through
``fleet.prepare.PREPARE`` (``FLEET_PREPARE``), which loads this module only where a fleet
is: tasks/ never imports fleet/.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import redis

from mainboard.config import Config, ProviderHost
from mainboard.errors import FleetSyncError, MainboardError, UserError, first_line
from mainboard.fleet.keeperclient import keeper_pid
from mainboard.fleet.launch import ssh_from_dict
from mainboard.fleet.prepare import batch_workers
from mainboard.fleet.records import pool_active, pool_paused, read_fleet
from mainboard.fleet.workers import allocation_entry, broker_route, fleet_entries
from mainboard.hosts.access import Hosts
from mainboard.receipts import WorkerStarted
from mainboard.tasks import BATCH_QUEUE

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


def evaluating(config: Config, route: BrokerRoute) -> list[WorkerStarted]:
    """Live fleet workers that consume the batch queue and have not gone silent (a worker
    that never beat yet is still starting: it will take batches too)."""
    # lazy: start-up time, `fleet/status` brings control, Flower and reconcile: only with
    # fleet workers to look at
    from mainboard.fleet import status

    live = batch_workers(config)
    if not live:
        return []
    try:
        entries = fleet_entries(route, live)
    except redis.RedisError:
        entries = {}
    now = time.time()
    beats = {w.worker_id: allocation_entry(entries, w).get("beat") for w in live}
    return [w for w in live if not beats[w.worker_id]
            or now - float(beats[w.worker_id] or 0) <= status.STALE_AFTER_S]


def _same_place(declared: str, recorded: str) -> bool:
    """The host's root as mainboard.toml spells it names the worker's recorded root."""
    if declared.startswith("~/"):
        return recorded.endswith(declared[1:])
    return os.path.normpath(declared) == os.path.normpath(recorded)


def mirror_of(config: Config, hosts: Hosts, worker: WorkerStarted) -> Mirror:
    """The mirror a worker's host root is synced with: the one jobs share (same manifest)
    when mainboard.toml still names that root, else the root the worker was started in."""
    # lazy: start-up time, the mirror (tar, gitignore rules) only with a host to sync
    from mainboard.hosts.mirror import Mirror

    if worker.rental and worker.ssh:
        return Mirror(config, worker.host, ssh_from_dict(worker.ssh, worker.host), worker.root,
                      env=config.host(worker.host).env, machine=worker.rental.get("rental_id"))
    handle = hosts.on(worker.host)
    root = handle.root if _same_place(handle.root, worker.root) else worker.root
    return Mirror(config, worker.host, handle.transport, root, env=handle.config.env)


def _sync_one(host: str, root: str, mirror: Callable[[], Mirror], fix: str) -> HostSync:
    start = time.perf_counter()
    try:
        report = mirror().sync()
    except UserError:
        raise  # the workspace itself is wrong (e.g. a file name): exit 2, as for jobs
    except (MainboardError, OSError) as exc:
        raise FleetSyncError(
            f"fleet host {host!r}: cannot sync the workspace into {root} before the run "
            f"({first_line(exc, 200)}); the run did not start: bring the host back, "
            f"or {fix}") from exc
    took = time.perf_counter() - start
    log.info("workspace synced to %s:%s in %.3f s (%d files sent, %d removed)", host,
             report.root, took, len(report.files), len(report.deleted))
    return HostSync(host, report.root, report, took)


def standby_pools(config: Config) -> list[str]:
    """Declared, autoscaled pools consuming the batch queue that the running keeper will
    grow from zero for a run's batches (none without a keeper)."""
    if not config.fleet.pools or keeper_pid(config.state_dir) is None:
        return []
    state = read_fleet(config.state_dir)
    return [name for name, pool in config.fleet.pools.items()
            if pool.autoscaled and (pool.max_jobs or 0) > 0 and BATCH_QUEUE in pool.queues
            and pool_active(state, name) and not pool_paused(state, name)]


def standby_pool(config: Config) -> str | None:
    """The first standby pool, said in words (none: a run with ``--workers 0`` and no
    worker is refused)."""
    for name in standby_pools(config):
        pool = config.fleet.pools[name]
        return (f"pool {name!r} (autoscaled, up to {pool.max_jobs} allocation(s) on "
                f"{pool.host})")
    return None


def _standby_hosts(config: Config, synced: set[str]) -> list[str]:
    """Hosts of standby pools not synced through a live worker: their first worker may
    start mid-run and must find the workspace there. A provider host has no machine
    before it is rented: its launch mirrors the workspace instead (fleet.provider)."""
    hosts = {config.fleet.pools[n].host for n in standby_pools(config)}
    return sorted(h for h in hosts - synced if not isinstance(config.host(h), ProviderHost))


def machines(workers: Sequence[WorkerStarted]) -> dict[tuple[str, str, str | None],
                                                      WorkerStarted]:
    """One worker per machine to sync: a host and root, and for a provider host each of its
    rentals (they share the host's name and root, not their disks)."""
    return {(w.host, w.root, (w.rental or {}).get("rental_id")): w for w in workers}


def sync_fleet(config: Config, workers: Sequence[WorkerStarted] | None = None
               ) -> list[HostSync]:
    """Mirror the workspace to each machine (host and root, or rental) of ``workers`` (default:
    every evaluating fleet worker, and the hosts of standby pools), hosts in parallel;
    FleetSyncError names the first host that failed. No fleet (or no broker running) is
    nothing to do."""
    standby: list[str] = []
    if workers is None:
        live = batch_workers(config)
        route = broker_route(config, start=False) if live else None
        workers = evaluating(config, route) if route is not None else []
        standby = _standby_hosts(config, {w.host for w in workers})
    targets = machines(workers)
    if not targets and not standby:
        return []
    from mainboard.hosts.mirror import Mirror  # lazy: start-up time, as in mirror_of

    with Hosts(config=config) as hosts, \
            ThreadPoolExecutor(min(PARALLEL_HOSTS, len(targets) + len(standby))) as pool:
        futures = [pool.submit(_sync_one, w.host, w.root, partial(mirror_of, config, hosts, w),
                               f"stop its workers with `mainboard fleet down --on {w.host}`")
                   for w in targets.values()]
        futures += [pool.submit(_sync_one, name, hosts.on(name).root,
                                partial(Mirror.of, hosts.on(name)),
                                "take its pool down with `mainboard fleet down`")
                    for name in standby]
        return [f.result() for f in futures]


__all__ = ["HostSync", "evaluating", "mirror_of", "standby_pool",
           "standby_pools", "sync_fleet"]
