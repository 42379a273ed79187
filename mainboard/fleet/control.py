"""The fleet: Celery workers on every kind of host, started and stopped as one.

``fleet_up`` checks everything it can before any connection (``launch.plan``), starts
the embedded broker if needed, then starts one worker per host in parallel: a detached
process on local/ssh/provider hosts, a job on SLURM/PBS. Workers on remote hosts reach a
loopback-only broker through a reverse SSH tunnel held by the keeper
(:mod:`mainboard.fleet.keeper`, reached through :mod:`mainboard.fleet.keeperclient`). A host that fails is reported in one line; the others
still come up. ``fleet_down`` stops the workers the way :mod:`mainboard.fleet.workers`
does for the keeper too (drain, cancel, destroy rentals, record). All of it is in
receipts (:mod:`mainboard.fleet.records`), so any process can ask for the status or
call ``fleet_down``. Flower starts with the fleet and stops with its last worker.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from mainboard.bridges.jobstate import JobStatus
from mainboard.bridges.providers import adapters_from_config, destroy_all_owned
from mainboard.bridges.providers.lifecycle import FLEET
from mainboard.config import Config, ProviderHost
from mainboard.errors import MainboardError, UserError, first_line
from mainboard.fleet.keeperclient import ensure_keeper, stop_keeper, wait_tunnel, wake_keeper
from mainboard.fleet.launch import BrokerRoute, Launcher, UpOptions, plan
from mainboard.fleet.pools import plan_pools
from mainboard.fleet.provider import start_rented
from mainboard.fleet.records import fleet_receipts, pool_active, pool_changes, read_fleet
from mainboard.fleet.workers import (
    DRAIN_TIMEOUT_S,
    broker_route,
    host_transport,
    poll_jobs,
    stop_workers,
)
from mainboard.receipts import FleetScale, WorkerStarted
from mainboard.services.broker import check_broker, embedded_down
from mainboard.services.flower import Flower

__all__ = ["DownReport", "UpOptions", "UpReport", "fleet_broker", "fleet_down", "fleet_up",
           "resume_pool", "start_one",
           "stop_workers"]


@dataclass
class UpReport:
    """What ``fleet_up`` did: workers started, hosts that failed (one line each), Flower."""

    started: list[WorkerStarted] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)  # pool -> allocations already live
    flower_url: str | None = None
    flower_error: str | None = None


def default_hosts(config: Config) -> list[str]:
    """Every declared host but provider hosts (rentals cost money: name them with --on)."""
    declared = [n for n, h in config.hosts.items() if not isinstance(h, ProviderHost)]
    return declared or ["local"]


def start_one(launcher: Launcher, name: str) -> WorkerStarted:
    """One allocation on host ``name`` (a rental first on a provider host)."""
    config = launcher.config
    if isinstance(config.host(name), ProviderHost):
        return start_rented(launcher, name)
    return launcher.start(launcher.target(name, host_transport(config, name)))


def fleet_broker(config: Config, *, start: bool,
                 workers: Sequence[WorkerStarted] = ()) -> BrokerRoute | None:
    """The fleet's broker, checked to answer (BrokerError in one line when it does not).

    ``start`` starts the embedded broker when it is not running. Without ``start``, an
    embedded broker that is not running is None while no live worker expects it (nothing
    to ask), and an error when ``workers`` do; a configured ``[broker] url`` must answer.
    """
    route = broker_route(config, start=start)
    if route is None:
        if workers:
            raise embedded_down(config.state_dir, len(workers))
        return None
    check_broker(route.url, config)
    return route


def fleet_up(config: Config, hosts: Sequence[str] | None = None,
             options: UpOptions | None = None, *, flower: bool = True,
             timings: dict[str, dict[str, float]] | None = None,
             pools: Sequence[str] = (), jobs: int | None = None) -> UpReport:
    """Bring each pool to its count (see :mod:`mainboard.fleet.pools`); refusals raise
    before any traffic, host failures are listed."""
    options = options or UpOptions()
    plans = plan_pools(config, options, hosts=hosts or (), pools=pools, jobs=jobs,
                       default_hosts=default_hosts(config))
    for pool in plans:
        plan(config, [pool.host], pool.options)
    route = fleet_broker(config, start=True)
    assert route is not None
    report = UpReport()
    work: list[tuple[Launcher, str]] = []
    live = read_fleet(config.state_dir).live()
    for pool in plans:
        report.kept[pool.name] = kept = len(unfinished(config, pool.members(live)))
        launcher = _launcher(config, pool.options, route, timings)
        launcher.pool = pool.name if pool.declared else None
        work += [(launcher, pool.host)] * max(0, pool.target - kept)
    flower_up = _start_flower(config, route) if flower and work else None
    if work:
        if any(launcher.tunnels(config.host(host)) for launcher, host in work):
            # the keeper's start (a new process) overlaps the hosts' connect and provision
            threading.Thread(target=ensure_keeper, name="keeper-start", daemon=True,
                             args=(config.root, config.path, config.state_dir)).start()
        with ThreadPoolExecutor(max_workers=min(8, len(work))) as threads:
            futures = [(launcher, host, threads.submit(start_one, launcher, host))
                       for launcher, host in work]
        for launcher, name, future in futures:
            try:
                report.started.append(future.result())
            except MainboardError as exc:
                text = first_line(exc)
                report.failed[name] = text if text.startswith(f"host {name!r}") \
                    else f"host {name!r}: {text}"
                if launcher.pool:  # counted like the keeper's (mainboard_allocations_failed)
                    fleet_receipts(config.state_dir).append(FleetScale(
                        pool=launcher.pool, action="submit_failed", reason=text))
    if work and not config.fleet.pools and not read_fleet(config.state_dir).live():
        stop_keeper(config.state_dir)  # started alongside, but nothing came up to hold
    kept = [p for p in plans if p.declared]
    for pool in kept:  # after our own submissions, so the keeper never doubles them
        fleet_receipts(config.state_dir).append(FleetScale(
            pool=pool.name, action="start", reason="fleet up", target=pool.target))
    if kept:  # the keeper keeps them: replacing the dead, following the work
        ensure_keeper(config.root, config.path, config.state_dir)
    if flower_up is not None:
        flower_up.join()
        report.flower_url, report.flower_error = flower_up.url, flower_up.error
        if not report.started and not read_fleet(config.state_dir).live():
            Flower(config.state_dir).down()  # started alongside, but no worker came up
            report.flower_url = None
    return report


class _FlowerStart(threading.Thread):
    """Flower starting alongside the hosts' launches (it takes seconds to answer)."""

    def __init__(self, config: Config, route: BrokerRoute) -> None:
        super().__init__(name="flower-start", daemon=True)
        self.config, self.route = config, route
        self.url: str | None = None
        self.error: str | None = None

    def run(self) -> None:
        try:
            self.url = Flower(self.config.state_dir).up(self.route.url,
                                                        config_path=self.config.path).url
        except (MainboardError, OSError) as exc:
            self.error = str(exc)


def _start_flower(config: Config, route: BrokerRoute) -> _FlowerStart:
    started = _FlowerStart(config, route)
    started.start()
    return started


def _launcher(config: Config, options: UpOptions, route: BrokerRoute,
              timings: dict[str, dict[str, float]] | None) -> Launcher:
    keeper_args = (config.root, config.path, config.state_dir)
    launcher = Launcher(config, options, route, partial(ensure_keeper, *keeper_args),
                        partial(wait_tunnel, *keeper_args),
                        partial(wake_keeper, config.state_dir))
    if timings is not None:
        launcher.timings = timings  # per host and phase, for `bench/bench_fleet.py`
    return launcher


def unfinished(config: Config, workers: Sequence[WorkerStarted]) -> list[WorkerStarted]:
    """Workers whose job has not ended (a host that cannot be asked: counted as running)."""
    if not workers:
        return []
    found = poll_jobs(config, workers)
    return [w for w in workers if not (isinstance(s := found[w.worker_id], JobStatus)
                                       and s.final)]


@dataclass
class DownReport:
    """What ``fleet_down`` did, per worker (its final state, or the error)."""

    outcome: dict[str, str] = field(default_factory=dict)
    workers: list[WorkerStarted] = field(default_factory=list)
    rentals_destroyed: list[str] = field(default_factory=list)


def fleet_down(config: Config, hosts: Sequence[str] | None = None, *,
               timeout: float = DRAIN_TIMEOUT_S, force: bool = False) -> DownReport:
    """Drain and stop the workers (of ``hosts``, or all); the last one out stops Flower.

    ``force`` forgets workers on hosts that cannot be reached (see ``stop_workers``).
    """
    for name in hosts or ():
        config.host(name)  # an unknown name is refused, listing the declared ones
    fleet = read_fleet(config.state_dir)
    which = set(hosts) if hosts else None
    live = fleet.live(which)
    if live or config.broker.url:  # draining asks the workers over the broker
        fleet_broker(config, start=False, workers=live)
    stopping = [name for name, pool in config.fleet.pools.items()  # a pool on a host going
                if pool_active(fleet, name) and (not hosts or pool.host in hosts)]  # down too
    if stopping:
        with pool_changes(config.state_dir):  # a submission in flight lands first; none after
            for name in stopping:
                fleet_receipts(config.state_dir).append(FleetScale(
                    pool=name, action="stop", reason="fleet down"))
        fleet = read_fleet(config.state_dir)
        landed = fleet.live(which)  # with what a submission in flight started
        if {w.worker_id for w in landed} - {w.worker_id for w in live}:
            fleet_broker(config, start=False, workers=landed)
        live = landed
    report = DownReport(workers=live)
    lost = frozenset(fleet.lost) if force else frozenset()
    report.outcome = stop_workers(config, live, reason="fleet down", timeout=timeout,
                                  force=force, skip=lost)
    if not hosts and config.providers:
        # Only the fleet's own rentals (and unowned old ones): a job's rental may run a job.
        report.rentals_destroyed = destroy_all_owned(
            config.state_dir, adapters_from_config(config), label_prefix="mainboard-",
            reason="fleet down", owners=(FLEET, None))
    if not read_fleet(config.state_dir).live():
        stop_keeper(config.state_dir)
        Flower(config.state_dir).down()
    return report


def resume_pool(config: Config, name: str) -> None:
    """Let a paused pool submit again (the failure count starts over)."""
    if name not in config.fleet.pools:
        have = ", ".join(config.fleet.pools) or "none ([fleet.pools.NAME] tables)"
        raise UserError(f"pool {name!r} is not declared; declared pools: {have}")
    fleet_receipts(config.state_dir).append(FleetScale(pool=name, action="resume",
                                                       reason="fleet resume-pool"))
    ensure_keeper(config.root, config.path, config.state_dir)
