"""What waits for a pool, read from Redis: its queues' depth and time needs, and the
running runs whose coordinators wait on its queues (the keeper's demand and the runs whose
logs hear about its workers)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis

from mainboard import keys
from mainboard.tasks.timeneed import need_of


def queue_depth(client: redis.Redis, queues: Sequence[str]) -> int:
    """Messages waiting in the pool's queues."""
    return sum(int(client.llen(keys.celery_queue(q))) for q in queues)


RECENT_RUNS = 200  # the newest runs asked for demand (older ones have long finished)


NEED_SCAN = 200  # messages of each queue read for their time need (the head: next to go)


def queue_need(client: redis.Redis, queues: Sequence[str]) -> float | None:
    """The largest ``time_request`` among the messages waiting in ``queues`` (their head)."""
    needs = []
    for queue in queues:
        for raw in client.lrange(keys.celery_queue(queue), 0, NEED_SCAN - 1):
            try:
                headers = json.loads(raw).get("headers")
            except (ValueError, AttributeError):
                continue
            needs.append(need_of(headers if isinstance(headers, dict) else None))
    return max((n for n in needs if n is not None), default=None)


def running_runs(client: redis.Redis, queues: Sequence[str]) -> dict[str, int]:
    """``{run id: batches its coordinator still waits for}`` of the running runs on
    ``queues`` (a coordinator that died leaves no lease: its run is not running)."""
    ids = client.zrevrange(keys.runs_index(), 0, RECENT_RUNS - 1)
    if not ids:
        return {}
    with client.pipeline(transaction=False) as pipe:
        for run_id in ids:
            pipe.hmget(keys.run_state(run_id), "status", "outstanding", "queue")
            pipe.exists(keys.run_lease(run_id))
        replies = pipe.execute()
    return {run_id: int(outstanding or 0)
            for run_id, (status, outstanding, queue), leased
            in zip(ids, replies[::2], replies[1::2], strict=True)
            if status == "running" and leased and queue in queues}


def run_demand(client: redis.Redis, queues: Sequence[str]) -> int:
    """Batches the running runs' coordinators still wait for on ``queues``."""
    return sum(running_runs(client, queues).values())


__all__ = ["queue_depth", "queue_need", "run_demand", "running_runs"]
