"""The autoscaler at work: the fleet keeper's thread that follows each pool's queues.

Every ``SCALE_TICK_S`` it looks at each autoscaled pool that ``fleet up`` started (and
``fleet down`` did not stop): its allocations (the fleet receipts, asked of the
scheduler or provider; the worker registry for tasks in hand and idle time) and the
depth of its queues in Redis. The policy (:mod:`mainboard.fleet.scaling`) says what to
do; each decision is carried out here and written as a ``fleet.scale`` receipt with
its reason. Everything it knows is in receipts, so a keeper killed and restarted picks
up the same allocations and the same failure count, and submits nothing twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import redis

from mainboard.bridges.jobstate import JobStatus
from mainboard.bridges.poller import RedisShare, Share
from mainboard.config import Config, PoolConfig, ProviderHost
from mainboard.errors import JobCapReached, MainboardError, first_line
from mainboard.fleet.control import start_one
from mainboard.fleet.demand import queue_depth, queue_need, run_demand, running_runs
from mainboard.fleet.goal import Goals
from mainboard.fleet.keeperclient import ensure_keeper, tunnel_status, wait_tunnel
from mainboard.fleet.launch import DEFAULT_RETIRE_BEFORE_S, BrokerRoute, Launcher, UpOptions
from mainboard.fleet.pools import pool_options
from mainboard.fleet.records import (
    FleetState,
    fleet_receipts,
    pool_active,
    pool_changes,
    pool_events,
    pool_paused,
    read_fleet,
)
from mainboard.fleet.scaling import Alloc, Decision, PoolView, decide, lead_time, target
from mainboard.fleet.spend import next_price, spend
from mainboard.fleet.workers import (
    DRAIN_TIMEOUT_S,
    allocation_entry,
    broker_route,
    fleet_entries,
    poll_jobs,
    record_ended,
    registry,
    scheduler_share,
    stop_workers,
)
from mainboard.receipts import FleetScale, WorkerStalled, WorkerStarted
from mainboard.runs.logs import LogLine, append_logs
from mainboard.statedir import fleet_dir
from mainboard.tasks import HEARTBEAT_S

SCALE_TICK_ENV = "MAINBOARD_SCALE_TICK_S"  # tests shorten it
SCALE_TICK_S = 5.0
TICKS_FILE = "autoscale.ticks"  # in the fleet folder: {"pid": keeper, "ticks": looks done}
LOST_AFTER_S = 3 * HEARTBEAT_S  # as `fleet status` says lost: replaced from then on
STALL_DRAIN_S = 5.0  # a stalled worker's warm shutdown may never come: cancelled after this
log = logging.getLogger("mainboard.fleet.autoscale")


def asked(state: FleetState, name: str) -> int | None:
    """The target the last ``fleet up`` gave the pool."""
    starts = [s for s in pool_events(state, name) if s.action == "start"]
    return starts[-1].target if starts else None


def failures(state: FleetState, name: str) -> int:
    """Failed submissions in a row (a success, a resume or a new ``fleet up`` resets it)."""
    count = 0
    for event in pool_events(state, name):
        if event.action == "submit_failed":
            count += 1
        elif event.action in ("submit", "resume", "start"):
            count = 0
    return count


def _left(worker: WorkerStarted, pool: PoolConfig, entry: dict[str, str],
          began: float | None, now: float) -> float | None:
    """Seconds until the worker retires before its walltime (None: no walltime known): the
    time the worker's own retire clock recorded, else its start plus walltime (later than
    the allocation's real start by the worker's boot, so a little late)."""
    if entry.get("retire_at"):
        return float(entry["retire_at"]) - now
    spec = worker.job.get("spec") or {}
    walltime = spec.get("walltime")
    if began is None or not walltime:
        return None
    retire = pool.retire_before or DEFAULT_RETIRE_BEFORE_S
    return began + float(walltime) - min(float(retire), float(walltime)) - now


def silent_s(worker: WorkerStarted, beat: float | None, now: float,
             tunnels: dict[str, dict[str, object]]) -> float | None:
    """How long the worker has been silent in a way that says it is gone (None: no sign).

    A worker that reaches the broker through this keeper's reverse tunnel cannot beat while
    the tunnel is down: a keeper restarted (SIGKILL, reboot) finds its last beat as old as
    its own absence, and must not call it lost for that. Its silence counts from the later
    of its last beat and the moment its tunnel came up again; with no healthy tunnel it is
    not judged here (the keeper marks an unreachable host lost after its retry budget)."""
    if beat is None:
        return None
    if worker.broker_via != "tunnel":
        return now - beat
    row = tunnels.get(worker.worker_id) or {}
    since = row.get("since") if row.get("healthy") else None
    if not isinstance(since, int | float):
        return None
    return now - max(beat, float(since))


@dataclass
class Look:
    """One look at a pool: the policy's view, and what must be recorded before acting."""

    members: dict[str, WorkerStarted]
    view: PoolView = field(default_factory=lambda: PoolView("", PoolConfig(host="local")))
    ended: list[tuple[WorkerStarted, str]] = field(default_factory=list)  # job over: state
    stale: list[tuple[WorkerStarted, float]] = field(default_factory=list)  # silent for s
    began: list[tuple[WorkerStarted, float]] = field(default_factory=list)  # newly running
    lost: int = 0


class Autoscaler:
    """Follows the work for every autoscaled pool of one workspace (one keeper thread)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.pools = dict(config.fleet.pools)  # fixed pools too: their dead get replaced
        self.said: dict[str, str] = {}  # pool -> last hold reason (written once, not per tick)
        self.stopping: set[str] = set()  # worker ids being drained by a stop thread
        self._lock = threading.Lock()
        self.every = float(os.environ.get(SCALE_TICK_ENV) or SCALE_TICK_S)
        self._share: Share | None = None

    def share(self) -> Share:
        """Where the pools' scheduler listings are shared (one per cluster a tick, with
        workers, monitor passes and ``jobs list``): the broker's, once it answers."""
        if not isinstance(self._share, RedisShare):
            self._share = scheduler_share(self.config)
        return self._share

    def active(self) -> bool:
        """Any pool started and not stopped: the keeper must stay."""
        state = read_fleet(self.config.state_dir)
        return any(pool_active(state, n) for n in self.pools)

    def tick(self) -> None:
        state = read_fleet(self.config.state_dir)
        route = broker_route(self.config, start=False)
        if route is None:
            return
        looks: dict[str, Look] = {}
        for name, pool in self.pools.items():
            if pool_active(state, name) and not pool_paused(state, name):
                try:
                    looks[name] = self.look(name, pool, state, route.url)
                except (MainboardError, redis.RedisError) as exc:
                    log.warning("pool %s: %s", name, exc)
        try:  # runs with a deadline size the pools serving them (fleet/goal)
            Goals(self.config, route.url).apply(state, looks)
        except Exception as exc:  # noqa: BLE001 - the pools are still scaled on their queues
            log.warning("run goals: %s", exc)
        for name, look in looks.items():
            try:
                self.carry(name, look)
            except (MainboardError, redis.RedisError) as exc:
                log.warning("pool %s: %s", name, exc)

    def look(self, name: str, pool: PoolConfig, state: FleetState, url: str, *,
             priced: bool = True) -> Look:
        """The pool as it is now; nothing is changed (``fleet status --pools`` asks too,
        without ``priced``: the provider's listing is asked only before renting, and a
        listing that cannot be read stops the tick, so nothing is rented unpriced)."""
        with self._lock:
            stopping = set(self.stopping)
        members = [w for w in state.live() if w.pool == name and w.worker_id not in state.lost
                   and w.worker_id not in stopping]
        found = poll_jobs(self.config, members, self.share(), self.every)
        look = Look(members={w.worker_id: w for w in members})
        entries = fleet_entries(BrokerRoute(url), members) if members else {}
        tunnels = tunnel_status(self.config.state_dir) \
            if any(w.broker_via == "tunnel" for w in members) else {}
        now = time.time()
        allocs: list[Alloc] = []
        waits = [e for e in pool_events(state, name) if e.action == "running"]
        seen = {i for e in waits for i in e.worker_ids}
        for worker in members:
            status = found[worker.worker_id]
            if isinstance(status, JobStatus) and status.final:  # ended (retired, lost): gone
                look.ended.append((worker, status.state.value))
                continue
            entry = allocation_entry(entries, worker)  # all its nodes together
            beat = float(entry["beat"]) if entry.get("beat") else None
            silent = silent_s(worker, beat, now, tunnels)
            if silent is not None and silent > LOST_AFTER_S:  # node death, partition...
                look.stale.append((worker, silent))
                continue
            last = entry.get("last_task") or entry.get("started")
            pend = isinstance(status, JobStatus) and status.state.value == "pending"
            began = float(entry["started"]) if entry.get("started") else None
            if began is not None and worker.worker_id not in seen:
                look.began.append((worker, began - float(worker.job.get("submitted_at") or began)))
            allocs.append(Alloc(worker.worker_id, "pending" if pend or not entry else "running",
                                int(entry.get("active") or 0),
                                now - float(last) if last else None,
                                _left(worker, pool, entry, began, now)))
        with registry(BrokerRoute(url)) as client:
            depth = queue_depth(client, pool.queues)
            demand = run_demand(client, pool.queues)
            need = queue_need(client, pool.queues) if pool.max_walltime is not None else None
        host = self.config.host(pool.host)
        price, rented, spent = None, 0.0, 0.0
        if isinstance(host, ProviderHost):
            rates, spent_by = spend(self.config, state)
            rented, spent = rates.get(name, 0.0), spent_by.get(name, 0.0)
            if priced and (pool.max_usd_hr is not None or pool.budget_usd is not None):
                price = next_price(self.config, host)
        look.view = PoolView(name, pool, allocs, queue_depth=depth, outstanding=demand,
                             failures=failures(state, name), usd_hr=price,
                             rented_usd_hr=rented, spent_usd=spent, jobs=asked(state, name),
                             paused=pool_paused(state, name), need_s=need,
                             stall_after=float(self.config.fleet.stall_of(pool)),
                             lead_s=lead_time([e.wait_s for e in waits if e.wait_s is not None]
                                              + [w for _, w in look.began]))
        look.lost = sum(s != "completed" for _, s in look.ended) + len(look.stale) + sum(
            1 for i in state.lost if i in state.started and i not in state.stopped
            and state.started[i].pool == name)
        return look

    def summary(self, state: FleetState, url: str) -> list[dict[str, object]]:
        """Per pool: target, pending, running, idle, lost, queue depth (``fleet status``)."""
        rows = []
        for name, pool in self.pools.items():
            look = self.look(name, pool, state, url, priced=False)
            view = look.view
            rows.append({"pool": name, "host": pool.host, "autoscaled": pool.autoscaled,
                         "active": pool_active(state, name), "paused": view.paused,
                         "target": target(view), "pending": view.count("pending"),
                         "running": view.count("running"),
                         "idle": sum(a.state == "running" and a.active == 0
                                     for a in view.allocs),
                         "lost": look.lost, "queue_depth": view.queue_depth,
                         "outstanding": view.outstanding})
        return rows

    def scale(self, name: str, pool: PoolConfig, state: FleetState, url: str) -> None:
        """One pool's look and its decisions carried out."""
        self.carry(name, self.look(name, pool, state, url))

    def carry(self, name: str, look: Look) -> None:
        """Record what the look found, then carry out the policy's decisions."""
        pool = look.view.pool
        for worker, final in self._still_live(look.ended):
            record_ended(self.config, worker, final)  # lost unless it completed
        for worker, wait in look.began:  # the queue waits replacements are timed by
            fleet_receipts(self.config.state_dir).append(FleetScale(
                pool=name, action="running", worker_ids=[worker.worker_id], wait_s=wait,
                reason=f"running {wait:.1f} s after its submission"))
        for worker, silent in look.stale:
            stop_workers(self.config, [worker], timeout=5.0, lost=True,
                         reason=f"lost: no heartbeat for {silent:.0f} s")
        for decision in decide(look.view):
            self.act(name, pool, look.view, decision, look.members)

    def record(self, name: str, view: PoolView, decision: Decision, action: str | None = None,
               reason: str | None = None, ids: Sequence[str] = ()) -> None:
        event = FleetScale(pool=name, action=action or decision.action,
                           reason=reason or decision.reason, count=len(ids) or decision.count,
                           worker_ids=list(ids or decision.worker_ids), target=decision.target,
                           queue_depth=view.queue_depth)
        fleet_receipts(self.config.state_dir).append(event)
        log.info("pool %s: %s %s: %s", name, event.action, event.count, event.reason)

    def act(self, name: str, pool: PoolConfig, view: PoolView, decision: Decision,
            members: dict[str, WorkerStarted]) -> None:
        if decision.action == "hold":
            if self.said.get(name) != decision.reason:
                self.said[name] = decision.reason
                self.record(name, view, decision)
            return
        if decision.action != "submit":  # a submission may still meet the site's cap: held
            self.said.pop(name, None)
        if decision.action == "restart":
            self.restart(name, view, decision, members)
        elif decision.action == "pause":
            self.record(name, view, decision)
        elif decision.action in ("cancel", "retire"):
            self.record(name, view, decision)
            self.stop_later([members[i] for i in decision.worker_ids],
                            f"autoscale {decision.action}: {decision.reason}",
                            # a cancelled one never beat: no task in hand, nothing to drain
                            drain_s=0.0 if decision.action == "cancel" else DRAIN_TIMEOUT_S)
        elif decision.action == "submit":
            self.submit(name, pool, view, decision)

    def restart(self, name: str, view: PoolView, decision: Decision,
                members: dict[str, WorkerStarted]) -> None:
        """Stalled workers said so (``worker.stalled``, the runs' logs), then stopped as
        lost: the same decide() submitted their replacements."""
        idle = {a.worker_id: a.idle_s or 0.0 for a in view.allocs}
        workers = [members[i] for i in decision.worker_ids]
        for worker in workers:
            fleet_receipts(self.config.state_dir).append(WorkerStalled(
                worker_id=worker.worker_id, host=worker.host, pool=name,
                idle_s=idle.get(worker.worker_id, 0.0), queue_depth=view.queue_depth,
                reason=decision.reason))
        self.record(name, view, decision)
        route = broker_route(self.config, start=False)
        if route is not None:
            with contextlib.suppress(redis.RedisError), registry(route) as client:
                now = time.time()
                lines = [LogLine(now, "warning", w.node, w.host, f"worker {w.node} stalled: "
                                 f"{decision.reason}; the fleet keeper restarts it")
                         for w in workers]
                for run_id in running_runs(client, view.pool.queues):
                    append_logs(client, run_id, lines)
        self.stop_later(workers, f"stalled: {decision.reason}", drain_s=STALL_DRAIN_S,
                        lost=True)

    def _still_live(self, ended: list[tuple[WorkerStarted, str]]
                    ) -> list[tuple[WorkerStarted, str]]:
        """The ended workers no stop thread has recorded meanwhile. The look read the fleet
        record at the tick's start; a stop thread that recorded its worker stopped (its own
        reason: stalled, retired) after that read and left ``stopping`` before the look
        would have it recorded a second time as "its job ended". ``stopping`` is read first,
        then the record: a thread that left it had recorded its stop before."""
        if not ended:
            return ended
        with self._lock:
            stopping = set(self.stopping)
        live = {w.worker_id for w in read_fleet(self.config.state_dir).live()}
        return [(w, final) for w, final in ended
                if w.worker_id not in stopping and w.worker_id in live]

    def stop_later(self, workers: list[WorkerStarted], reason: str, drain_s: float,
                   lost: bool = False) -> None:
        """Drain and stop ``workers`` in a thread of their own: the next look (another
        pool's, or this one's next idle worker) does not wait for their warm shutdown."""
        ids = {w.worker_id for w in workers}
        with self._lock:
            self.stopping |= ids

        def stop() -> None:
            try:
                stop_workers(self.config, workers, reason=reason, timeout=drain_s, lost=lost)
            except Exception as exc:  # noqa: BLE001 - the next look sees them again
                log.warning("stopping %s: %s", ", ".join(sorted(ids)), exc)
            finally:
                with self._lock:
                    self.stopping -= ids

        threading.Thread(target=stop, name="autoscale-stop", daemon=True).start()

    def submit(self, name: str, pool: PoolConfig, view: PoolView, decision: Decision) -> None:
        route = broker_route(self.config, start=False)
        assert route is not None
        args = (self.config.root, self.config.path, self.config.state_dir)
        options = pool_options(pool, UpOptions())
        if decision.walltime is not None:  # sized for the time needs waiting
            options = replace(options, walltime=decision.walltime)
        launcher = Launcher(self.config, options, route,
                            partial(ensure_keeper, *args), partial(wait_tunnel, *args))
        launcher.pool = name
        if view.usd_hr and pool.max_usd_hr is not None:  # the offer decided on, or cheaper:
            # never past the limit (the margin: $1.20 - $0.40 is 0.7999... in floats)
            launcher.usd_hr_cap = pool.max_usd_hr - view.rented_usd_hr + 1e-6
        for _ in range(decision.count):
            began = time.monotonic()
            try:
                with pool_changes(self.config.state_dir):
                    if not pool_active(read_fleet(self.config.state_dir), name):
                        log.info("pool %s: stopped since this look; nothing submitted", name)
                        return
                    started = start_one(launcher, pool.host)
            except JobCapReached as exc:  # the site's cap: wait, said once, never a pause
                self.act(name, pool, view, replace(decision, action="hold",
                                                   reason=first_line(exc)), {})
                return
            except MainboardError as exc:
                self.said.pop(name, None)
                self.record(name, view, decision, "submit_failed", first_line(exc))
                return
            self.said.pop(name, None)
            self.record(name, view, decision, ids=[started.worker_id],
                        reason=f"{decision.reason} (submitted in "
                               f"{time.monotonic() - began:.1f} s)")


def run_autoscaler(scaler: Autoscaler, stop: threading.Event, every: float) -> None:
    """The keeper's thread: one look every ``every`` seconds until ``stop``; each look done
    is counted in ``TICKS_FILE`` (``ticks_done``: what "nothing happened for N looks" is
    judged by, rather than by a wall-clock wait)."""
    done = 0
    while not stop.wait(every):
        try:
            scaler.tick()
        except Exception as exc:  # noqa: BLE001 - the keeper must keep its tunnels
            log.warning("autoscale tick failed: %s", exc)
        done += 1
        with contextlib.suppress(OSError):
            path = fleet_dir(scaler.config.state_dir) / TICKS_FILE
            path.with_suffix(".tmp").write_text(json.dumps({"pid": os.getpid(), "ticks": done}))
            path.with_suffix(".tmp").replace(path)


def ticks_done(state_dir: Path) -> tuple[int, int] | None:
    """(keeper pid, looks it has finished) from ``TICKS_FILE``; None before its first."""
    try:
        data = json.loads((fleet_dir(state_dir) / TICKS_FILE).read_text())
        return int(data["pid"]), int(data["ticks"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


__all__ = ["Autoscaler", "failures", "run_autoscaler", "ticks_done"]
