"""Node roles: what a live fleet worker consumes, changed while it runs, and one worker stopped.

A role is a queue name: ``mainboard.batches`` makes a worker an evaluator, and
``mainboard.coordinator`` lets it own runs (their samplers). ``fleet assign`` and ``fleet
unassign`` tell the running worker through Celery's ``add_consumer``/``cancel_consumer``
and record the change twice: in Redis (``keys.worker_roles``, read by the worker when it
starts, :func:`mainboard.tasks.fleet.apply_roles`) and as a ``worker.roles`` receipt.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from mainboard import keys
from mainboard.config import Config
from mainboard.errors import BrokerError, UserError
from mainboard.fleet.records import check_queue, fleet_receipts, node_names, read_fleet
from mainboard.fleet.workers import broker_route, fleet_entries, registry, stop_workers
from mainboard.names import lazy
from mainboard.receipts import WorkerRoles, WorkerStarted
from mainboard.tasks import BATCH_QUEUE, COORDINATOR_QUEUE

ROLES = {"evaluator": BATCH_QUEUE, "coordinator": COORDINATOR_QUEUE}
REPLY_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class RoleChange:
    """What ``assign``/``unassign`` did: the worker, its nodes that answered, and the queues
    each now consumes (empty for a node that did not answer: it applies them at start)."""

    worker: WorkerStarted
    queues: list[str]
    consume: bool
    consumed: dict[str, list[str]]


def queues_of(queues: str | None, role: str | None) -> list[str]:
    """``--queues Q,...`` and ``--role`` as queue names (at least one)."""
    named = [check_queue(q.strip()) for q in (queues or "").split(",") if q.strip()]
    if role is not None:
        named.append(ROLES[role])
    if not named:
        raise UserError("give --queues Q[,Q...] or --role evaluator|coordinator")
    return list(dict.fromkeys(named))


def find_worker(config: Config, name: str) -> WorkerStarted:
    """The live worker called ``name``: its worker id, its node name (``local-local-123``)
    or a node's full Celery name (``local-local-123@machine``)."""
    live = read_fleet(config.state_dir).live()
    wanted = name.partition("@")[0]
    for worker in live:
        if name == worker.worker_id or wanted in node_names(worker):
            return worker
    known = ", ".join(w.node for w in live) or "none: start some with `mainboard fleet up`"
    raise UserError(f"no live fleet worker {name!r}; live workers: {known}")


def change_roles(config: Config, worker: WorkerStarted, queues: Sequence[str], *,
                 consume: bool) -> RoleChange:
    """Record the roles, then tell the worker's nodes; raises BrokerError when the broker
    does not answer (nothing recorded)."""
    route = broker_route(config, start=False)
    if route is None:
        raise BrokerError("the broker is not running: start it with `mainboard broker up` "
                          "(or `mainboard fleet up`), then assign roles")
    try:
        with registry(route) as client:
            client.hset(keys.worker_roles(worker.worker_id),
                        mapping=dict.fromkeys(queues, "1" if consume else "0"))
        nodes = [e["node"] for e in fleet_entries(route, [worker]).values()]
    except redis.RedisError as exc:
        raise BrokerError(f"the broker did not answer ({exc}): is it up? "
                          "`mainboard broker status`") from exc
    fleet_receipts(config.state_dir).append(WorkerRoles(
        worker_id=worker.worker_id, host=worker.host, queues=list(queues), consume=consume))
    consumed = _tell(route.url, nodes, queues, consume=consume)
    return RoleChange(worker, list(queues), consume, consumed)


def _tell(url: str, nodes: list[str], queues: Sequence[str], *, consume: bool
          ) -> dict[str, list[str]]:
    """Celery's add/cancel consumer on ``nodes``, then what each consumes (asked back)."""
    if not nodes:
        return {}
    make_app = lazy("celery.app")  # Celery loads only where a message is sent
    app = make_app(broker_url=url)
    try:
        for queue in queues:
            if consume:
                app.control.add_consumer(queue, destination=nodes, reply=True,
                                         timeout=REPLY_TIMEOUT_S)
            else:
                app.control.cancel_consumer(queue, destination=nodes, reply=True,
                                            timeout=REPLY_TIMEOUT_S)
        return _consumed_after(app, nodes, queues, consume=consume)
    finally:
        app.close()


def _consumed_after(app: Any, nodes: list[str], queues: Sequence[str], *, consume: bool
                    ) -> dict[str, list[str]]:
    """What each node consumes once the change shows. A worker applies add/cancel consumer
    on its next loop turn, after replying: a busy worker that read both messages at once
    answers the question before it made the change, so the question is asked again (until
    every node that answers shows it, or REPLY_TIMEOUT_S)."""
    deadline = time.monotonic() + REPLY_TIMEOUT_S
    while True:
        active = app.control.inspect(destination=nodes, timeout=REPLY_TIMEOUT_S)
        replies = active.active_queues() or {}
        now = {node: sorted(q["name"] for q in replies.get(node, [])) for node in nodes}
        shown = all((q in now[node]) == consume for node in replies for q in queues)
        if shown or time.monotonic() >= deadline:
            return now
        time.sleep(0.1)


def stop_one(config: Config, worker: WorkerStarted, *, timeout: float) -> str:
    """Warm-stop one worker (its task in hand finishes) and end its allocation; its
    outcome as ``fleet down`` words it. Its pool may replace it."""
    return stop_workers(config, [worker], reason="fleet stop", timeout=timeout)[worker.worker_id]


__all__ = ["ROLES", "RoleChange", "change_roles", "find_worker", "queues_of", "stop_one"]
