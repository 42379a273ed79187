"""One batched scheduler listing per tick per cluster, shared by every process that asks.

Why: submitit #1759 (sacct polling trips Slurm's RPC limits), Parsl #3814 (``sacct``
hangs with 200 jobs). Fleet workers asking their allocation's end, the keeper's
reconciler listing by owner tag, monitor passes and ``jobs list/show`` each used to ask
the scheduler per call, per host or per job: O(callers) commands a minute at one
slurmctld. Now each asks for the cluster's *listing*: one command (the bridge's class
data ``listing_command``, parsed by its ``parse_listing``: state, end and tag of every job
of this user) whose answer is kept for a tick where all of them read it.

Two places keep it: Redis (``RedisShare``: the workspace's broker, where workers on
compute nodes and the controller meet; ages by Redis ``TIME``, so skewed clocks agree)
and the workspace state (``FileShare``: a JSON file per cluster under ``.mainboard/sched``
with a flock, for callers without a running broker). The first caller that finds the
listing older than its tick refreshes it under the share's lock; the others wait for that
answer rather than asking too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import redis

from mainboard import keys
from mainboard.locks import flocked

Rows = dict[str, dict[str, str]]  # job id -> the fields its listing line gave
Fetch = Callable[[], Rows | None]  # runs the one command; None: the scheduler did not answer
LOCK_S = 60.0  # the refresher's lock outlives a hung command no longer than this
WAIT_S = 10.0  # how long a reader waits for another process's refresh, then asks itself
TICK_S = 15.0  # the controller's tick (jobs list/show, monitor passes, the keeper)
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end"


@dataclass(frozen=True)
class Listing:
    """One cluster's listing: when it was taken (the share's clock) and its rows."""

    at: float
    rows: Rows


class Share(Protocol):
    """Where a cluster's listing is kept between the callers of one tick."""

    def get(self, cluster: str, tick: float, fetch: Fetch, since: float = 0.0
            ) -> Listing | None:
        """The listing at most ``tick`` seconds old and taken after ``since`` (epoch s):
        read, or refreshed here through ``fetch``; None: nothing known, none fetched."""
        ...


def _fresh(found: Listing | None, now: float, tick: float, since: float) -> bool:
    return found is not None and now - found.at < tick and found.at >= since


def _late(found: Listing | None, cluster: str, tick: float, fetch: Fetch, since: float
          ) -> Listing | None:
    """Another refresher took too long: the last listing will do, unless the caller needs
    one taken since ``since`` (it must see a recent submission): then it asks itself."""
    return found if found is not None and found.at >= since else \
        PerCall().get(cluster, tick, fetch, since)


class PerCall:
    """No share: every caller asks the scheduler itself (what each did before the shared
    listing; the bench's "before"). ``poller_for`` gives no poller for it, so job states
    go the per-call way (``Bridge._query``)."""

    def get(self, cluster: str, tick: float, fetch: Fetch, since: float = 0.0
            ) -> Listing | None:
        rows = fetch()
        return None if rows is None else Listing(time.time(), rows)


class RedisShare:
    """The listing in the broker (``keys.sched_listing``), refreshed under ``keys.sched_lock``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def _now(self) -> float:
        seconds, micros = self.client.time()
        return float(seconds) + micros / 1e6

    def _stored(self, cluster: str) -> Listing | None:
        at, data = self.client.hmget(keys.sched_listing(cluster), "at", "data")
        return None if at is None or data is None else Listing(float(at), json.loads(data))

    def get(self, cluster: str, tick: float, fetch: Fetch, since: float = 0.0
            ) -> Listing | None:
        """As ``Share.get``; with the broker away, this caller asks for itself (as before
        the share) rather than failing: a broker gone is not the scheduler's answer."""
        try:
            return self._get(cluster, tick, fetch, since)
        except (redis.RedisError, ValueError):  # away, or a name Redis keys cannot hold
            return PerCall().get(cluster, tick, fetch, since)

    def _get(self, cluster: str, tick: float, fetch: Fetch, since: float) -> Listing | None:
        deadline = time.monotonic() + WAIT_S
        while True:
            found = self._stored(cluster)
            if _fresh(found, self._now(), tick, since):
                return found
            token = uuid.uuid4().hex
            if self.client.set(keys.sched_lock(cluster), token, nx=True, px=int(LOCK_S * 1000)):
                try:
                    found = self._stored(cluster)  # refreshed while we took the lock?
                    if _fresh(found, self._now(), tick, since):
                        return found
                    at, rows = self._now(), fetch()
                    if rows is None:  # not stored: the next caller asks again
                        return found
                    self.client.hset(keys.sched_listing(cluster),
                                     mapping={"at": at, "data": json.dumps(rows)})
                    return Listing(at, rows)
                finally:
                    self.client.eval(_RELEASE, 1, keys.sched_lock(cluster), token)
            if time.monotonic() > deadline:  # the refresher hangs, or died holding the lock
                return _late(found, cluster, tick, fetch, since)
            time.sleep(0.2)  # another process is asking the scheduler right now


class FileShare:
    """The listing in the workspace state: ``<directory>/<cluster>.json``, refreshed under
    ``<cluster>.lock`` (flock: a killed refresher holds nothing). Redis-free."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def _path(self, cluster: str, suffix: str) -> Path:
        return self.directory / (re.sub(r"[^A-Za-z0-9_.-]", "_", cluster) + suffix)

    def _stored(self, path: Path) -> Listing | None:
        try:
            data = json.loads(path.read_text())
            return Listing(float(data["at"]), data["rows"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def get(self, cluster: str, tick: float, fetch: Fetch, since: float = 0.0
            ) -> Listing | None:
        path = self._path(cluster, ".json")
        found = self._stored(path)
        if _fresh(found, time.time(), tick, since):
            return found
        with flocked(self._path(cluster, ".lock"), wait=WAIT_S) as held:
            found = self._stored(path)  # refreshed while we waited for the lock?
            if _fresh(found, time.time(), tick, since):
                return found
            if not held:  # the refresher hangs
                return _late(found, cluster, tick, fetch, since)
            at, rows = time.time(), fetch()
            if rows is None:
                return found
            temp = self._path(cluster, f".{os.getpid()}.tmp")
            temp.write_text(json.dumps({"at": at, "rows": rows}))
            temp.replace(path)
            return Listing(at, rows)


@dataclass(frozen=True)
class Poller:
    """A caller's way to a cluster's listing: the share it is kept in, the cluster's name
    there (the host's name in the workspace), and how old a listing it accepts."""

    share: Share
    cluster: str
    tick: float = TICK_S


def poller_for(share: Share, cluster: str, tick: float = TICK_S) -> Poller | None:
    """The poller of ``cluster`` through ``share``; None for ``PerCall`` (ask per call)."""
    return None if isinstance(share, PerCall) else Poller(share, cluster, tick)


def run_listing(command: tuple[str, ...], parse: Callable[[str], Rows]) -> Rows | None:
    """Run a bridge's listing command here (a login or compute node) and parse it; None
    when the scheduler does not answer (a worker asks from inside its allocation)."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse(done.stdout) if done.returncode == 0 else None


def file_share(state_dir: Path) -> FileShare:
    """The workspace state's share: ``<state_dir>/sched``."""
    return FileShare(Path(state_dir) / "sched")


__all__ = ["FileShare", "Listing", "PerCall", "Poller", "RedisShare", "Rows", "Share", "TICK_S",
           "file_share", "poller_for", "run_listing"]
