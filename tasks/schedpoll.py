"""One scheduler query per tick per cluster, shared through the broker.

Why: every fleet worker on a SLURM cluster used to ask ``squeue -j <its job>`` for its
allocation's end every minute: 50 workers, 50 queries a minute at one slurmctld, which
sites throttle or ban. Now the first process that finds the cluster's listing in Redis
(``keys.sched_listing``) older than the tick takes a short Redis lock
(``keys.sched_lock``), runs the one batched command (the bridge's class data, e.g.
``SlurmBridge.ends_command``) and stores the answer with Redis' own time; the others read
it. Ages are measured by Redis ``TIME``, so nodes with skewed clocks agree on a tick.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable

import redis

from mainboard import keys

LOCK_S = 60.0  # the refresher's lock outlives a hung command no longer than this
WAIT_S = 30.0  # how long a reader waits for another process's refresh before asking itself
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end"

Fetch = Callable[[], dict[str, str] | None]  # None: the scheduler did not answer


def _now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return float(seconds) + micros / 1e6


def _stored(client: redis.Redis, cluster: str) -> tuple[float | None, dict[str, str]]:
    at, data = client.hmget(keys.sched_listing(cluster), "at", "data")
    if at is None or data is None:
        return None, {}
    return float(at), json.loads(data)


def shared_listing(client: redis.Redis, cluster: str, tick: float, fetch: Fetch) -> dict[str, str]:
    """The cluster's listing at most ``tick`` seconds old: read, or refreshed by this
    process under the lock (``fetch`` runs the one command), or by another one meanwhile."""
    deadline = time.monotonic() + WAIT_S
    while True:
        at, data = _stored(client, cluster)
        if at is not None and _now(client) - at < tick:
            return data
        token = uuid.uuid4().hex
        if client.set(keys.sched_lock(cluster), token, nx=True, px=int(LOCK_S * 1000)):
            try:
                at, data = _stored(client, cluster)  # refreshed while we took the lock?
                if at is not None and _now(client) - at < tick:
                    return data
                fresh = fetch()
                if fresh is None:  # not stored: the next caller asks again
                    return data
                client.hset(keys.sched_listing(cluster),
                            mapping={"at": _now(client), "data": json.dumps(fresh)})
                return fresh
            finally:
                client.eval(_RELEASE, 1, keys.sched_lock(cluster), token)
        if time.monotonic() > deadline:  # the refresher hangs: the last listing will do
            return data
        time.sleep(0.2)  # another process is asking the scheduler right now


def run_listing(command: tuple[str, ...], parse: Callable[[str], dict[str, str]]
                ) -> dict[str, str] | None:
    """Run a bridge's batched listing command here (a login or compute node) and parse it;
    None when the scheduler does not answer."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse(done.stdout) if done.returncode == 0 else None


__all__ = ["shared_listing", "run_listing"]
