"""``fleet status``: each worker as its host's scheduler sees it, merged with Celery's view.

Three sources, each answering what only it knows: the bridge (is the job queued,
running, finished, and how), a Celery broadcast (is the worker answering right now,
which queues it consumes), and the worker registry the fleet workers write
(:mod:`mainboard.tasks.fleet`: last heartbeat, tasks done). A host that cannot be asked does not
hide the others: its rows say why. A multi-node allocation has one row per node
(``node_index``), each with its own name and heartbeat and the allocation's one job.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, replace

import redis

from mainboard import keys
from mainboard.bridges.jobstate import JobStatus
from mainboard.config import Config
from mainboard.errors import HostError, MainboardError
from mainboard.fleet.control import fleet_broker
from mainboard.fleet.keeperclient import ensure_keeper, keeper_pid
from mainboard.fleet.launch import BrokerRoute
from mainboard.fleet.reconcile import describe, open_intents, reconcile
from mainboard.fleet.records import FleetState, node_names, pool_active, read_fleet
from mainboard.fleet.workers import fleet_entries, job_of, poll_jobs, registry
from mainboard.names import lazy
from mainboard.receipts import WorkerStarted, WorkerStopped
from mainboard.tasks import HEARTBEAT_S

STALE_AFTER_S = 3 * HEARTBEAT_S
ALIVE_STATES = frozenset({"online", "starting", "stalled"})


@dataclass(frozen=True)
class WorkerView:
    """One row of ``fleet status`` (``--json`` prints these fields)."""

    worker_id: str
    host: str
    kind: str
    node: str
    job_id: str
    state: str  # queued, starting, online, stalled, lost, completed (retired), stopped
    job_state: str
    queues: list[str]
    concurrency: int
    tasks_done: int | None
    active: int | None
    last_heartbeat: float | None
    online: bool
    broker_via: str
    rental_id: str | None
    stopped: bool
    reason: str
    node_index: int | None = None  # which node of a multi-node allocation (one row each)
    uuid: str | None = None  # the worker process's own id: a restart under one name shows

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def alive(self) -> bool:
        """Running as far as anyone can tell: answering, or its job runs and beats recently."""
        return self.state in ALIVE_STATES


def _celery_view(route: BrokerRoute, timeout: float) -> dict[str, list[str]]:
    """``{full node name: queues}`` of every worker answering a broadcast within ``timeout``."""
    make_app = lazy("celery.app")  # Celery loads only where a message is sent
    app = make_app(broker_url=route.url)
    try:
        replies = app.control.inspect(timeout=timeout).active_queues() or {}
    except (OSError, redis.RedisError):
        return {}
    finally:
        app.close()
    return {node: [q.get("name", "") for q in queues] for node, queues in replies.items()}


def _state(job: JobStatus | MainboardError, online: bool, beat: float | None) -> str:
    """A worker that ended on its own (retired) is ``completed``; one whose job was taken
    (preempted, scancel, node failure, killed at walltime) or whose heartbeat stopped for
    STALE_AFTER_S is ``lost``: not ``starting``, which is only a job running that never beat."""
    if isinstance(job, MainboardError):
        return "unknown"
    if job.final:
        return job.state.value if job.state.value == "completed" else "lost"
    if job.state.value == "pending":
        return "queued"
    if online:
        return "online"
    if job.native.upper().startswith("COMPLETING") \
            or beat is not None and time.time() - beat > STALE_AFTER_S:
        return "lost"
    return "starting"


def revive_keeper(config: Config, state: FleetState) -> None:
    """A keeper that died (SIGKILL, reboot) while pools were up is started again: it
    rebuilds everything from the receipts and submits nothing twice."""

    if keeper_pid(config.state_dir) is not None:
        return
    pools = any(pool_active(state, n) for n in config.fleet.pools)
    if pools or open_intents(state):  # what the dead controller left: adopted or cleaned
        done = reconcile(config)
        for line in describe(done):
            print(line, file=sys.stderr)
    if pools:
        ensure_keeper(config.root, config.path, config.state_dir)


def fleet_status(config: Config, *, include_stopped: bool = False,
                 timeout: float = 1.0, revive: bool = True) -> list[WorkerView]:
    """Every live worker (and, with ``include_stopped``, the stopped ones), oldest first.
    ``revive=False`` only looks (a metrics scrape never starts a keeper).

    The broker must answer (BrokerError in one line otherwise) whenever it is configured
    or live workers use it; an embedded broker that is not running while no worker
    expects it is no error: there is nothing to ask.
    """
    state = read_fleet(config.state_dir)
    live = state.live()
    route = fleet_broker(config, start=False, workers=live)
    if revive:  # a metrics scrape never (re)starts the keeper
        revive_keeper(config, state)
        state = read_fleet(config.state_dir)  # the reconciler may have adopted workers
        live = state.live()
    # A host the keeper gave up on is not asked again: status answers without waiting on it.
    jobs = {**poll_jobs(config, [w for w in live if w.worker_id not in state.lost]),
            **{i: HostError(lost.reason) for i, lost in state.lost.items()}}
    celery = _celery_view(route, timeout) if route and live else {}
    try:
        entries = fleet_entries(route, live) if route and live else {}
        depths = _depths(route, live) if route and live else {}
    except redis.RedisError:
        entries, depths = {}, {}
    rows = [_stalled(_row(w, jobs[w.worker_id], celery, entries.get(name, {}), name,
                          i if w.nodes > 1 else None), entries.get(name, {}),
                     sum(depths.get(q, 0) for q in w.queues), _stall_after(config, w))
            for w in live for i, name in enumerate(node_names(w))]
    rows = [replace(r, state="lost") if r.worker_id in state.lost else r for r in rows]
    if include_stopped:
        for worker_id, stop in state.stopped.items():
            worker = state.started.get(worker_id)
            if worker is not None:
                rows.append(_stopped_row(worker, stop))
    return rows


def _stall_after(config: Config, worker: WorkerStarted) -> float:
    pool = config.fleet.pools.get(worker.pool or "")
    return config.fleet.stall_of(pool) if pool else config.fleet.stall_after


def _depths(route: BrokerRoute, workers: list[WorkerStarted]) -> dict[str, int]:
    """Tasks waiting in each queue the workers consume, in one round trip."""
    queues = sorted({q for w in workers for q in w.queues})
    with registry(route) as client, client.pipeline(transaction=False) as pipe:
        for queue in queues:
            pipe.llen(keys.celery_queue(queue))
        return dict(zip(queues, map(int, pipe.execute()), strict=True))


def _stalled(row: WorkerView, entry: dict[str, str], waiting: int, after: float) -> WorkerView:
    """``stalled``: beating, nothing in hand, no task started for ``after`` seconds while
    ``waiting`` tasks sit in its queues (what the keeper restarts)."""
    last = entry.get("last_task") or entry.get("started")
    if row.state not in ("online", "starting") or row.last_heartbeat is None or not last \
            or row.active or waiting <= 0 or time.time() - float(last) < after:
        return row
    return replace(row, state="stalled", reason=f"no task started for "
                   f"{time.time() - float(last):.0f} s while {waiting} task(s) wait")


def _row(worker: WorkerStarted, job: JobStatus | MainboardError, celery: dict[str, list[str]],
         entry: dict[str, str], name: str, index: int | None) -> WorkerView:
    """One worker: the allocation's only one, or node ``index``'s (Celery name ``name``)."""
    node = next((n for n in celery if n.partition("@")[0] == name), None)
    beat = float(entry["beat"]) if entry.get("beat") else None
    reason = str(job) if isinstance(job, MainboardError) else (job.reason or job.native)
    return WorkerView(
        worker_id=worker.worker_id, host=worker.host, kind=worker.kind,
        node=node or entry.get("node") or f"{name}@?", job_id=job_of(worker).job_id,
        state=_state(job, node is not None, beat),
        job_state=job.state.value if isinstance(job, JobStatus) else "unknown",
        queues=celery[node] if node else list(worker.queues), concurrency=worker.concurrency,
        tasks_done=int(entry["tasks_done"]) if entry.get("tasks_done") else None,
        active=int(entry["active"]) if entry.get("active") else None,
        last_heartbeat=beat, online=node is not None, broker_via=worker.broker_via,
        rental_id=worker.rental["rental_id"] if worker.rental else None, stopped=False,
        reason=reason, node_index=index, uuid=entry.get("uuid") or None)


def _stopped_row(worker: WorkerStarted, stop: WorkerStopped) -> WorkerView:
    """A worker gone: ``lost`` if it was taken (its replacement is the keeper's business),
    else ``stopped`` (drained, retired, cancelled by ``fleet down``)."""
    return WorkerView(
        worker_id=worker.worker_id, host=worker.host, kind=worker.kind, node=f"{worker.node}@?",
        job_id=job_of(worker).job_id, state="lost" if stop.lost else "stopped",
        job_state=stop.state or "unknown",
        queues=list(worker.queues), concurrency=worker.concurrency, tasks_done=None, active=None,
        last_heartbeat=None, online=False, broker_via=worker.broker_via,
        rental_id=worker.rental["rental_id"] if worker.rental else None, stopped=True,
        reason=stop.reason)


def pool_status(config: Config) -> list[dict[str, object]]:
    """Per declared pool: target, pending, running, idle, lost and queue depth (the broker
    must answer; an embedded broker not running means every count is zero)."""
    # lazy: start-up time, the autoscaler (numpy, Celery) only for `fleet status --pools`
    from mainboard.fleet.autoscale import Autoscaler

    state = read_fleet(config.state_dir)
    route = fleet_broker(config, start=False, workers=state.live())
    if route is None:
        return [{"pool": n, "host": p.host, "autoscaled": p.autoscaled, "active": False,
                 "paused": False, "target": 0, "pending": 0, "running": 0, "idle": 0,
                 "lost": 0, "queue_depth": 0, "outstanding": 0}
                for n, p in config.fleet.pools.items()]
    return Autoscaler(config).summary(state, route.url)
