"""The fleet's running workers: where they beat (the registry), their jobs, how they stop.

Both ``fleet down`` (:mod:`mainboard.fleet.control`) and the keeper's idle check
(:mod:`mainboard.fleet.keeper`) stop workers the same way: drain (Celery's warm
shutdown: the task in hand finishes), cancel what did not stop, destroy rentals, record.
Everything here works from receipts, so a new process can stop what another started.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import redis

from mainboard import keys
from mainboard.bridges import bridge_class, bridge_for
from mainboard.bridges.base import Bridge, JobRecord
from mainboard.bridges.jobstate import JobStatus
from mainboard.bridges.poller import TICK_S, RedisShare, Share, file_share, poller_for
from mainboard.bridges.providers import should_destroy
from mainboard.bridges.providers.base import Rental
from mainboard.bridges.providers.bridge import ProviderBridge
from mainboard.bridges.providers.lifecycle import destroy_rental, rental_receipts
from mainboard.bridges.transport import Transport
from mainboard.config import Config, ProviderHost
from mainboard.errors import HostError, MainboardError, first_line
from mainboard.fleet.launch import (
    BrokerRoute,
    remove_secret,
    ssh_from_dict,
)
from mainboard.fleet.records import fleet_receipts, node_names
from mainboard.hosts.access import Hosts
from mainboard.hosts.rentals import adapter
from mainboard.names import lazy
from mainboard.receipts import WorkerStarted, WorkerStopped
from mainboard.redisclient import redis_client
from mainboard.services.broker import EmbeddedBroker, worker_url

DRAIN_TIMEOUT_S = 60.0
REDRAIN_S = 2.0  # while draining, the registry is looked at again this often for new nodes
CANCEL_WAIT_S = 20.0

def broker_route(config: Config, *, start: bool) -> BrokerRoute | None:
    """The broker URLs (``[broker] url`` or the embedded one, started when ``start``): the
    coordinator's, and its workers' (a user without dangerous commands)."""
    if config.broker.url:
        return BrokerRoute(config.broker.url, worker_url(config.broker.url, config))
    broker = EmbeddedBroker(config.state_dir, tls=config.broker.tls if start else None)
    if start:
        broker.up()
    elif not broker.status().running:
        return None
    return BrokerRoute(broker.url(), worker_url(broker.url(), config))


def scheduler_share(config: Config) -> Share:
    """Where this workspace's scheduler listings are shared (one per cluster a tick,
    :mod:`mainboard.bridges.poller`): the broker when one answers, where the fleet's
    workers keep theirs; else the workspace state (``.mainboard/sched``)."""
    route = broker_route(config, start=False)
    if route is not None:
        client = redis_client(route.url, socket_timeout=5, socket_connect_timeout=1)
        try:
            client.ping()
            return RedisShare(client)
        except redis.RedisError:
            client.close()
    return file_share(config.state_dir)


def registry(route: BrokerRoute) -> redis.Redis:
    """A short-timeout client for the worker registry (``keys.workers_index``)."""
    return redis_client(route.url, socket_timeout=5, socket_connect_timeout=5,
                        decode_responses=True)


def registry_entries(route: BrokerRoute, prefixes: Iterable[str]) -> dict[str, dict[str, str]]:
    """``{node prefix: registry hash (+ "node")}`` for the fleet workers that ever beat."""
    wanted = set(prefixes)
    found: dict[str, dict[str, str]] = {}
    with registry(route) as client:
        for node in client.zrange(keys.workers_index(), 0, -1):
            prefix = node.partition("@")[0]
            if prefix in wanted:
                found[prefix] = {**client.hgetall(keys.worker(node)), "node": node}
    return found


def fleet_entries(route: BrokerRoute, workers: Iterable[WorkerStarted]
                  ) -> dict[str, dict[str, str]]:
    """``registry_entries`` of every node of ``workers`` (one name per node: ``node_names``)."""
    return registry_entries(route, [n for w in workers for n in node_names(w)])


def allocation_entry(entries: Mapping[str, dict[str, str]], worker: WorkerStarted
                     ) -> dict[str, str]:
    """One allocation's registry entry: its worker's, or its nodes' together, so a pool
    counts, idles and loses a multi-node allocation as one: empty until every node has
    beat, then the stalest beat (one silent node makes it lost), tasks in hand and done
    summed, the latest task or start as ``last_task`` (idle only when every node is)."""
    names = node_names(worker)
    found = [entries[n] for n in names if n in entries]
    if len(names) == 1 or len(found) < len(names):
        return found[0] if len(names) == 1 and found else {}

    def numbers(*fields: str) -> list[float]:
        return [float(v) for e in found if (v := next((e[f] for f in fields if e.get(f)), None))]

    merged = {**found[0], "active": str(int(sum(numbers("active")))),
              "tasks_done": str(int(sum(numbers("tasks_done"))))}
    for key, fields, pick in (("beat", ("beat",), min), ("started", ("started",), max),
                              ("last_task", ("last_task", "started"), max)):
        values = numbers(*fields)
        merged.pop(key, None)
        if values:
            merged[key] = str(pick(values))
    return merged


def host_transport(config: Config, name: str) -> Transport:
    """The login-side transport of a declared host, paths resolved like the Board does."""
    return Hosts(config=config).on(name).transport


def bridge_of(config: Config, worker: WorkerStarted) -> Bridge:
    """The bridge that can ask about, and cancel, ``worker``'s job (from a new process too)."""
    if worker.rental and worker.ssh:
        host = config.host(worker.host)
        assert isinstance(host, ProviderHost)
        rental = Rental(worker.rental["rental_id"], "running", worker.ssh["host"],
                        worker.ssh["port"], worker.ssh["user"], 0.0)
        return ProviderBridge(worker.host, host, rental, identity=worker.ssh["identity"],
                              known_hosts=Path(worker.ssh["known_hosts"]), root=worker.root)
    host = config.host(worker.host)
    return bridge_for(worker.host, host, host_transport(config, worker.host),
                      container=config.container_of(host), root=worker.root)


def job_of(worker: WorkerStarted) -> JobRecord:
    """The bridge's record of the worker's job, as the receipt keeps it."""
    return JobRecord.model_validate(worker.job)


def poll_jobs(config: Config, workers: Sequence[WorkerStarted], share: Share | None = None,
              tick: float = TICK_S) -> dict[str, JobStatus | MainboardError]:
    """Each worker's job status by worker id (a host that cannot be asked gives its error);
    with ``share``, from each cluster's listing at most ``tick`` seconds old (the keeper's
    look each tick), else asked now."""
    out: dict[str, JobStatus | MainboardError] = {}
    by_host: dict[tuple[str, str, str], list[WorkerStarted]] = {}
    for worker in workers:  # one bridge per host, root and (for rentals) machine
        rental = worker.rental["rental_id"] if worker.rental else ""
        by_host.setdefault((worker.host, worker.root, rental), []).append(worker)
    for group in by_host.values():
        try:
            bridge = bridge_of(config, group[0])
            found = bridge.poll([job_of(w) for w in group], poller=None if share is None
                                else poller_for(share, group[0].host, tick))
            out.update({w.worker_id: found[job_of(w).job_id] for w in group})
        except MainboardError as exc:
            out.update({w.worker_id: exc for w in group})
    return out


def drain(route: BrokerRoute | None, workers: Sequence[WorkerStarted],
          asked: Iterable[str] = ()) -> list[str]:
    """Ask the workers for Celery's warm shutdown (stop consuming, finish the task in hand);
    the nodes asked, none of ``asked`` (asked before).

    Node names come from the registry the workers beat into (:mod:`mainboard.tasks.fleet`), so no
    broadcast round has to be waited for; a node that is gone ignores the request.
    """
    if route is None or not workers:
        return []
    make_app = lazy("celery.app")  # Celery loads only where a message is sent
    before = set(asked)
    try:
        nodes = [e["node"] for e in fleet_entries(route, workers).values()
                 if e["node"] not in before]
    except redis.RedisError:
        return []
    if nodes:
        app = make_app(broker_url=route.url)
        try:
            app.control.shutdown(destination=nodes)
        finally:
            app.close()
    return nodes


def _cancel(config: Config, workers: Sequence[WorkerStarted]) -> None:
    for worker in workers:
        with contextlib.suppress(MainboardError):
            bridge_of(config, worker).cancel([job_of(worker)])


def _unfinished(workers: Sequence[WorkerStarted], found: dict[str, JobStatus | MainboardError],
                state: str | None = None) -> list[WorkerStarted]:
    """Workers whose job is known and not final (and, with ``state``, in that state)."""
    return [w for w in workers if isinstance(s := found[w.worker_id], JobStatus)
            and not s.final and (state is None or s.state.value == state)]


def _wait_final(config: Config, workers: list[WorkerStarted], timeout: float,
                route: BrokerRoute | None = None, asked: Iterable[str] = ()
                ) -> dict[str, JobStatus | MainboardError]:
    """Until every job is final or ``timeout``. With ``route``, the registry is looked at
    again every ``REDRAIN_S`` for workers still running that were not among ``asked``: one
    that had not beat into it when the drain began (started a moment before, or its entry
    lost with the broker's data) is asked once it has, instead of being cancelled at the
    timeout. (A look reads the registry; Celery is loaded only to ask a new node.)"""
    deadline = time.monotonic() + timeout
    looked = time.monotonic()
    asked = set(asked)
    while True:
        found = poll_jobs(config, workers)
        left = _unfinished(workers, found)
        if not left or time.monotonic() >= deadline:
            return found
        if route is not None and time.monotonic() - looked >= REDRAIN_S:
            asked.update(drain(route, left, asked))
            looked = time.monotonic()
        time.sleep(0.3)


def _destroy_rental(config: Config, worker: WorkerStarted, reason: str) -> None:
    assert worker.rental is not None
    host = config.host(worker.host)
    assert isinstance(host, ProviderHost)
    destroy_rental(adapter(config, host), rental_receipts(config.state_dir),
                   worker.rental["rental_id"], reason)


def cleanup_hint(worker: WorkerStarted) -> str:
    """What may still run on an unreachable host, and the command that ends it there."""
    job = job_of(worker).job_id
    if worker.rental:
        how = f"destroy rental {worker.rental['rental_id']} in the provider's console"
    else:
        how = bridge_class(worker.kind).cancel_hint(job) or shlex.join(["pkill", "-f", worker.node])
    return (f"worker {worker.node} (job {job}) may still run on {worker.host!r}; once it is "
            f"reachable, end it there with: {how}")


def stop_workers(config: Config, workers: Sequence[WorkerStarted], *, reason: str,
                 timeout: float = DRAIN_TIMEOUT_S, force: bool = False,
                 skip: frozenset[str] = frozenset(), lost: bool = False) -> dict[str, str]:
    """Drain, then cancel what is still running, destroy rentals, record; worker id -> outcome.
    ``lost``: they were taken from the fleet (``fleet status`` shows them lost, not stopped).

    With ``force``, a worker whose host cannot be asked (or in ``skip``: marked lost) is
    forgotten: recorded stopped, its outcome ``forgotten: <what may still run and how to
    end it>``, so a dead host can leave the fleet.
    """
    gone = [w for w in workers if w.worker_id in skip]
    workers = [w for w in workers if w.worker_id not in skip]
    found = poll_jobs(config, workers)
    _cancel(config, _unfinished(workers, found, "pending"))  # never started: nothing to drain
    route = broker_route(config, start=False)
    asked = drain(route, _unfinished(workers, found))
    found = _wait_final(config, workers, timeout, route, asked)
    late = _unfinished(workers, found)
    _cancel(config, late)
    if late:
        found.update(_wait_final(config, late, CANCEL_WAIT_S))
    outcome: dict[str, str] = {}
    found.update({w.worker_id: HostError(f"host {w.host!r} marked lost") for w in gone})
    for worker in [*workers, *gone]:
        status = found[worker.worker_id]
        if force and isinstance(status, MainboardError) and not worker.rental:
            fleet_receipts(config.state_dir).append(WorkerStopped(
                worker_id=worker.worker_id, host=worker.host, state="unknown",
                reason=f"{reason} --force: {first_line(str(status))}"))
            outcome[worker.worker_id] = f"forgotten: {cleanup_hint(worker)}"
            continue
        problem = str(status) if isinstance(status, MainboardError) else None
        if not problem:
            with contextlib.suppress(MainboardError):
                remove_secret(_secret_transport(config, worker), worker.secret_path)
        if worker.rental:
            try:
                _destroy_rental(config, worker, reason)
            except MainboardError as exc:
                outcome[worker.worker_id] = f"error: rental not destroyed: {exc}"
                continue
        elif problem:
            outcome[worker.worker_id] = f"error: {problem}"
            continue
        state = status.state.value if isinstance(status, JobStatus) else "unknown"
        fleet_receipts(config.state_dir).append(WorkerStopped(
            worker_id=worker.worker_id, host=worker.host, reason=reason, state=state,
            lost=lost))
        outcome[worker.worker_id] = state
    return outcome


def record_ended(config: Config, worker: WorkerStarted, final: str) -> None:
    """A worker whose job ended by itself (retired, killed, lost as a unit): its broker URL
    file removed from the host (best effort: the host may be gone too), then recorded."""
    with contextlib.suppress(MainboardError):
        remove_secret(_secret_transport(config, worker), worker.secret_path)
    fleet_receipts(config.state_dir).append(WorkerStopped(
        worker_id=worker.worker_id, host=worker.host, state=final,
        reason=f"its job ended: {final}", lost=final != "completed"))


def _secret_transport(config: Config, worker: WorkerStarted) -> Transport:
    if worker.ssh and worker.rental:
        return ssh_from_dict(worker.ssh, worker.host)
    return host_transport(config, worker.host)


def idle_workers(config: Config, workers: Sequence[WorkerStarted]) -> list[WorkerStarted]:
    """Rented workers that should go: idle past their timeout, or their rental broken."""
    route = broker_route(config, start=False)
    entries = fleet_entries(route, workers) if route else {}
    idle = []
    for worker in workers:
        if not worker.rental or worker.idle_timeout_s is None:
            continue
        entry = allocation_entry(entries, worker)
        if int(entry.get("active") or 0) > 0:
            continue  # a task is in hand: never idle
        host = config.host(worker.host)
        assert isinstance(host, ProviderHost)
        rental = adapter(config, host).status(worker.rental["rental_id"])
        last = float(entry["last_task"]) if entry.get("last_task") else \
            float(entry["started"]) if entry.get("started") else None
        if should_destroy(rental, last, worker.idle_timeout_s):
            idle.append(worker)
    return idle


__all__ = ["allocation_entry", "broker_route", "fleet_entries", "idle_workers", "poll_jobs",
           "record_ended", "registry_entries", "stop_workers"]
