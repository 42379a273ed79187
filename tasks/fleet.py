"""What a fleet worker adds to a plain Celery worker: a heartbeat, a task count, a probe task.

Fleet workers load this module (``-I mainboard.tasks.fleet``). Why it exists: ``fleet
status`` and the idle check of rented machines must know, from any process and without
waiting for a broadcast reply, when a worker last beat and last finished a task. Every
fleet worker (``$MAINBOARD_FLEET_WORKER`` set) writes that into the Redis worker registry
(``keys.workers_index`` and ``keys.worker``): a beat every ``HEARTBEAT_S`` from the main
process, ``active``/``tasks_done``/``last_task`` around each task from the pool process running it.

``mainboard.fleet.probe`` answers who ran it (node, host, pid, job id); sent to a host's
own queue (``mainboard.host.<host>``) it proves that a worker there takes work.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import redis
from billiard.process import current_process
from celery import shared_task
from celery.apps.worker import install_worker_term_handler
from celery.signals import (
    task_postrun,
    task_prerun,
    worker_process_init,
    worker_ready,
    worker_shutdown,
)

from mainboard import keys
from mainboard.bridges import bridge_class
from mainboard.bridges.base import Bridge
from mainboard.bridges.jobstate import JobState, translate
from mainboard.bridges.poller import RedisShare, run_listing
from mainboard.config.hostkinds import HOST_TABLE
from mainboard.redisclient import redis_client
from mainboard.tasks import GPU_ENV, HEARTBEAT_S, RETIRE_ENV, WALLTIME_ENV, broker_url_of
from mainboard.tasks.app import get_app
from mainboard.tasks.telemetry import KIND_ENV
from mainboard.tasks.timeneed import set_end

BEAT_TTL_S = 7 * 24 * 3600  # a worker hash outlives its worker for a week, then goes
PROBE_TASK = "mainboard.fleet.probe"
WORKER_ENV = "MAINBOARD_FLEET_WORKER"
HOST_ENV = "MAINBOARD_FLEET_HOST"
NODE_INDEX_ENV = "MAINBOARD_NODE_INDEX"  # set by a multi-node job's node script (bridges)
RETIRE_AT_ENV = "MAINBOARD_RETIRE_AT"
END_RECHECK_S = 60.0
log = logging.getLogger("mainboard.fleet")

_client: tuple[int, redis.Redis] | None = None
_stop = threading.Event()


def _redis() -> redis.Redis:
    """One client per process (pool processes are forks: never share a parent's socket)."""
    global _client
    if _client is None or _client[0] != os.getpid():
        _client = (os.getpid(), redis_client(broker_url_of(get_app().conf),
                                             socket_timeout=10))
    return _client[1]


def _fleet_worker() -> str | None:
    return os.environ.get(WORKER_ENV) or None


def beat(node: str, **fields: Any) -> None:
    """Record that ``node`` is alive now (and any extra fields) in the worker registry."""
    now = time.time()
    pipe = _redis().pipeline()
    pipe.zadd(keys.workers_index(), {node: now})
    pipe.hset(keys.worker(node), mapping={"beat": now, **{k: str(v) for k, v in fields.items()}})
    pipe.expire(keys.worker(node), BEAT_TTL_S)
    pipe.execute()


def _beat_forever(node: str) -> None:
    while not _stop.wait(HEARTBEAT_S):
        try:
            beat(node)
        except redis.RedisError as exc:  # the broker is away: Celery itself reconnects
            log.warning("fleet heartbeat of %s failed: %s", node, exc)


def _retire_on_sigint(worker: Any) -> None:
    """SIGINT (the retire signal jobs get before walltime) becomes a clean warm shutdown.

    Celery's own SIGINT handler is a warm shutdown that exits 1 (Ctrl-C at a terminal);
    a worker retiring on schedule has done nothing wrong, so its job must end COMPLETED.
    SIGINT is what the job script forwards because prefork pool processes ignore it,
    where SIGTERM sent to the whole process group would kill the task in hand.
    """
    if worker is None or threading.current_thread() is not threading.main_thread():
        return

    install_worker_term_handler(worker, sig="SIGINT")


def scheduler() -> type[Bridge] | None:
    """The bridge of this worker's host kind (``$MAINBOARD_HOST_KIND``, set by ``fleet up``):
    what its scheduler can be asked from inside an allocation is that class's data."""
    kind = os.environ.get(KIND_ENV)
    return bridge_class(kind) if kind in HOST_TABLE else None


def listing_cluster(bridge: type[Bridge]) -> str:
    """The name this worker's cluster's listing is shared under: the workspace's name of
    the host (``fleet up`` sets it), as the controller's callers name it too."""
    return os.environ.get(HOST_ENV) or bridge.cluster(os.environ)


def allocation_end(job_id: str) -> float | None:
    """When this allocation ends (SLURM 22.05 has no end-time variable): from the cluster's
    one shared listing of the tick (the bridge's ``listing_command``,
    :mod:`mainboard.bridges.poller`, the one the keeper, monitor and ``jobs list`` read
    too), so 50 workers cost the scheduler one query a minute, not 50; asked alone
    (``end_command``) when the listing predates this job's start or the broker is away.
    None where the kind's scheduler cannot be asked."""
    bridge = scheduler()
    if bridge is None or bridge.listing_command is None:
        return None
    fetch = partial(run_listing, bridge.listing_command, bridge.parse_listing)
    try:
        found = RedisShare(_redis()).get(listing_cluster(bridge), END_RECHECK_S, fetch)
        rows = found.rows if found is not None else {}
    except (redis.RedisError, ValueError):
        rows = {}
    if not _running(bridge, rows.get(job_id)) and bridge.end_command is not None:
        rows = run_listing((*bridge.end_command, job_id), bridge.parse_listing) or {}
    return bridge.end_time(rows[job_id]["end"]) if job_id in rows else None


def _running(bridge: type[Bridge], row: dict[str, str] | None) -> bool:
    """The row says the allocation runs: only then is its end fixed (a listing taken while
    the job was queued, by the keeper or a ``jobs list``, holds a guess or none)."""
    return row is not None and translate(row.get("state", ""), bridge.states) \
        is JobState.RUNNING


def retire_delay(end: float, retire_before: float, now: float) -> float:
    """Seconds until the worker must stop taking tasks (0: now)."""
    return max(0.0, end - retire_before - now)


def _retire_on_clock(node: str, job_id: str, retire_before: float, end: float | None) -> None:
    """Warm shutdown ``retire_before`` seconds before the allocation's end, by this host's
    clock: SLURM's ``--signal`` fires up to 60 s early, so it is only the backstop. The end is
    asked again every minute (an operator may extend the allocation); ``end`` is the first
    answer. When it retires goes into the registry (``retire_at``): the autoscaler times the
    replacement by this same clock, not by a guess from when the worker came up (issue 19);
    each answer is also what tasks' time needs are checked against
    (:mod:`mainboard.tasks.timeneed`)."""
    said: float | None = None
    while not _stop.is_set():
        set_end(end)
        if end is None:
            log.warning("retire clock: no end time for job %s; the scheduler's signal retires "
                        "it", job_id)
            return
        if end != said:
            try:
                beat(node, retire_at=end - retire_before)
                said = end
            except redis.RedisError as exc:  # asked again next round
                log.warning("fleet retire time of %s not recorded: %s", node, exc)
        delay = retire_delay(end, retire_before, time.time())
        if delay <= 0:
            log.info("retiring: allocation %s ends at %s, %.0f s from now", job_id,
                     time.strftime("%H:%M:%S", time.localtime(end)), end - time.time())
            os.kill(os.getpid(), signal.SIGINT)  # the warm shutdown installed below
            return
        _stop.wait(min(delay, END_RECHECK_S))
        end = allocation_end(job_id)


def _retire_at(when: float) -> None:
    """Warm shutdown at ``when`` (epoch seconds): where no scheduler can be asked for the
    end, every node of an allocation retires at the time its job script computed."""
    if not _stop.wait(retire_delay(when, 0.0, time.time())):
        log.info("retiring: the allocation's retire time %s has come",
                 time.strftime("%H:%M:%S", time.localtime(when)))
        os.kill(os.getpid(), signal.SIGINT)


def consumed(consumer: Any) -> str:
    """The queues a worker's consumer takes tasks from now, comma-separated and sorted."""
    return ",".join(sorted(q.name for q in consumer.task_consumer.queues))


def apply_roles(consumer: Any, worker_id: str) -> None:
    """Consume what ``fleet assign``/``unassign`` last said for this worker id (Celery's
    add/cancel consumer), before the first task: a restarted worker keeps its roles."""
    try:
        roles = _redis().hgetall(keys.worker_roles(worker_id))
    except redis.RedisError as exc:  # the roles it was started with still hold
        log.warning("fleet roles of %s not read: %s", worker_id, exc)
        return
    for raw, on in sorted(roles.items()):
        queue = raw.decode()
        if on == b"1":
            consumer.add_task_queue(queue)
        else:
            consumer.cancel_task_queue(queue)


@worker_ready.connect
def _on_ready(sender: Any = None, **_: Any) -> None:
    worker_id = _fleet_worker()
    node = getattr(sender, "hostname", None)
    if not worker_id or not node:
        return
    _retire_on_sigint(getattr(sender, "controller", None))
    apply_roles(sender, worker_id)
    beat(node, worker_id=worker_id, host=os.environ.get(HOST_ENV, ""), pid=os.getpid(),
         started=time.time(), tasks_done=0, active=0, job_id=os.environ.get("MAINBOARD_JOB_ID", ""),
         node_index=os.environ.get(NODE_INDEX_ENV, ""), uuid=uuid.uuid4().hex,
         queues=consumed(sender))
    threading.Thread(target=_beat_forever, args=(node,), name="fleet-heartbeat",
                     daemon=True).start()
    bridge = scheduler()
    job_id = bridge.allocation_id(os.environ) if bridge is not None else None
    retire = os.environ.get(RETIRE_ENV)
    at = os.environ.get(RETIRE_AT_ENV)
    if job_id and retire:
        end = allocation_end(job_id)  # known before the first task is taken
        set_end(end)
        threading.Thread(target=_retire_on_clock, args=(node, job_id, float(retire), end),
                         name="fleet-retire", daemon=True).start()
    elif at:  # a node of a multi-node PBS job: the node script's time, on every node
        threading.Thread(target=_retire_at, args=(float(at),), name="fleet-retire",
                         daemon=True).start()
    if not job_id:  # no scheduler to ask: the job script's start stamp + the walltime
        set_end(walltime_end(os.environ.get("MAINBOARD_JOB_DIR", ""),
                             os.environ.get(WALLTIME_ENV, "")))


def walltime_end(job_dir: str, walltime: str) -> float | None:
    """When a job ends that its own script's watchdog (local, ssh, rentals) or PBS ends
    ``walltime`` seconds after the script's ``started`` stamp; None when either is unknown."""
    try:
        started = float((Path(job_dir) / "started").read_text().split()[0].replace(",", "."))
        return started + float(walltime)
    except (OSError, ValueError, IndexError):
        return None


def pinned_device(visible: str, index: int) -> str:
    """The one device of pool process ``index`` among the allocation's ``visible`` ones
    (``CUDA_VISIBLE_DEVICES`` as the scheduler set it): never shared between processes."""
    devices = [d for d in visible.split(",") if d.strip()]
    if not devices:
        return ""
    if index >= len(devices):
        raise RuntimeError(f"worker process {index} has no GPU of its own: the allocation "
                           f"has {len(devices)} ({visible}); use at most that many workers")
    return devices[index]


@worker_process_init.connect
def _pin_gpu(**_: Any) -> None:
    """Each pool process sees one GPU (its index among the allocation's devices)."""
    if not os.environ.get(GPU_ENV):
        return

    index = int(getattr(current_process(), "index", 0) or 0)
    device = pinned_device(os.environ.get("CUDA_VISIBLE_DEVICES", ""), index)
    if device:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
        log.info("worker process %d pinned to GPU %s", index, device)


@worker_shutdown.connect
def _on_shutdown(**_: Any) -> None:
    _stop.set()


def _count(task: Any, done: bool) -> None:
    """``active`` up on start, down on finish (plus ``tasks_done``, ``last_task``)."""
    node = getattr(getattr(task, "request", None), "hostname", None)
    if not _fleet_worker() or not node:
        return
    try:
        pipe = _redis().pipeline()
        pipe.hincrby(keys.worker(node), "active", -1 if done else 1)
        if done:
            pipe.hincrby(keys.worker(node), "tasks_done", 1)
        pipe.hset(keys.worker(node), "last_task", time.time())
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("fleet task count of %s failed: %s", node, exc)


@task_prerun.connect
def _on_task_start(task: Any = None, **_: Any) -> None:
    _count(task, done=False)


@task_postrun.connect
def _on_task_done(task: Any = None, **_: Any) -> None:
    _count(task, done=True)


@shared_task(name=PROBE_TASK, bind=True)
def probe(self: Any, sleep_s: float = 0.0, until_path: str | None = None) -> dict[str, Any]:
    """Who runs this task; waits ``sleep_s`` (returning early once ``until_path`` exists).

    The wait lets an operator keep a worker busy on purpose, e.g. to watch a drain or a
    retirement finish the task in hand.
    """
    deadline = time.monotonic() + max(0.0, float(sleep_s))
    while time.monotonic() < deadline:
        if until_path and Path(until_path).exists():
            break
        time.sleep(0.1)
    return {"node": self.request.hostname, "host": os.environ.get(HOST_ENV, ""),
            "worker_id": _fleet_worker() or "", "pid": os.getpid(),
            "hostname": socket.gethostname(), "job_id": os.environ.get("MAINBOARD_JOB_ID", ""),
            "node_index": os.environ.get(NODE_INDEX_ENV, ""), "task_id": self.request.id}
