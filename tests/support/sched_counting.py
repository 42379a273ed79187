"""Scheduler commands counted: wrappers on PATH that log each call, then run the real one;
N fleet workers asking their allocation's end in one tick, and a minute of every caller
of a workspace on one cluster, per call and shared (the tests and the bench)."""

from __future__ import annotations

import shutil
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from mainboard import keys
from mainboard.board import Board
from mainboard.bridges.poller import TICK_S, PerCall, Poller, RedisShare, Rows, run_listing
from mainboard.bridges.slurm import SlurmBridge
from mainboard.jobs import live
from mainboard.jobs.job import bridge_of
from mainboard.jobs.monitor import monitor_pass

TICKS = max(1, int(60 / TICK_S))  # the controller's ticks in a minute
COMMANDS = ("squeue", "sbatch", "scontrol", "sacct", "scancel", "qstat", "qsub", "qdel")
ASKING = ("squeue", "sacct", "scontrol", "qstat")  # the commands that ask, not act


def counting_path(directory: Path, log: Path, path: str) -> str:
    """A PATH whose scheduler commands (``COMMANDS``) append their name to ``log`` first."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        real = shutil.which(name, path=path)
        assert real, f"{name} is not on PATH: is SLURM installed (scripts/bootstrap test)?"
        wrapper = directory / name
        wrapper.write_text(f'#!/bin/sh\necho {name} >> "{log}"\nexec "{real}" "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return f"{directory}:{path}"


def counts(log: Path) -> Counter[str]:
    """Calls per command so far."""
    return Counter(log.read_text().split()) if log.exists() else Counter()


def asked(log: Path) -> int:
    """Scheduler questions so far (``ASKING``: squeue, sacct, scontrol, qstat)."""
    found = counts(log)
    return sum(found[name] for name in ASKING)


def one_by_one(job_ids: list[str]) -> Rows:
    """Before: each worker asks squeue for its own job (``end_command``, one id)."""
    out: Rows = {}
    for job_id in job_ids:
        found = run_listing((*SlurmBridge.end_command, job_id), SlurmBridge.parse_listing)
        out.update(found or {})
    return out


def workers_tick(url: str, cluster: str, workers: int, tick: float) -> list[Rows]:
    """After: ``workers`` processes' threads (each its own Redis client) ask the shared
    listing at once; what each got."""
    got: list[Rows] = [{} for _ in range(workers)]

    def ask(i: int) -> None:
        with redis.Redis.from_url(url) as client:
            found = RedisShare(client).get(cluster, tick, lambda: run_listing(
                SlurmBridge.listing_command, SlurmBridge.parse_listing))
            got[i] = found.rows if found is not None else {}

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got


def age(client: redis.Redis, cluster: str, seconds: float) -> None:
    """The next tick: the cluster's stored listing made ``seconds`` older (what time would
    do), so its next reader refreshes it."""
    at = client.hget(keys.sched_listing(cluster), "at")
    if at is not None:
        client.hset(keys.sched_listing(cluster), "at", float(at) - seconds)


@dataclass
class Minute:
    """One minute of one workspace's callers on one cluster (``host``), each asking once:
    ``workers`` fleet workers their allocation's end, the keeper its listing by owner tag,
    ``monitors`` monitor passes and ``listings`` ``jobs list`` calls, spread over the
    controller's ticks of the minute (``60 / TICK_S``); and with ``looks``, the keeper's
    autoscaler looking at the workers' allocations that many times a tick."""

    board: Board
    host: str
    workers: list[str]  # the allocations' job ids the workers run in
    url: str            # the broker (the test's Redis)
    monitors: int = 1
    listings: int = 1
    looks: int = 0      # the keeper's looks a tick (3: its 5 s tick, SCALE_TICK_S)
    ends: bool = True   # the workers ask their allocation's end (PBS workers do not)

    def shared(self) -> None:
        """After: every caller through the cluster's one listing in the broker."""
        share = RedisShare(redis.Redis.from_url(self.url))
        self._minute(share, share.client, self.host,
                     lambda ids: workers_tick(self.url, self.host, len(ids), 60.0))

    def per_call(self, workers_share: bool = False) -> None:
        """Before: every caller asks for itself (the per-call status query of each monitor
        pass, ``jobs list`` and keeper look, the keeper's own listing), the workers each
        one squeue for their own job; with ``workers_share``, the workers one listing of
        their own a tick (as the code before this one had it: the others still per call)."""
        client = redis.Redis.from_url(self.url)
        apart = f"ends:{self.host}"
        client.delete(keys.sched_listing(apart))
        self._minute(None, client, apart, (lambda ids: workers_tick(
            self.url, apart, len(ids), 60.0)) if workers_share else one_by_one)

    def _minute(self, share: RedisShare | None, client: redis.Redis, aged: str,
                workers: Callable[[list[str]], object]) -> None:
        """The minute in steps (a tick, or a keeper's tick when it looks): the stored
        listing ``aged`` made a step older before each, as time would."""
        steps = max(1, self.looks)
        for step in range(TICKS * steps):
            if step:
                age(client, aged, TICK_S / steps)
            tick, sub = divmod(step, steps)
            if self.looks and self.workers:  # as its autoscaler asks, at its own tick
                bridge_of(self.board.on(self.host)).poll(self.workers, poller=None if share
                                                         is None else Poller(share, self.host,
                                                                             TICK_S / steps))
            if sub == 0:
                if self.ends:
                    self._workers(tick, workers)
                self._controller(tick, share)

    def _workers(self, tick: int, ask: Callable[[list[str]], object]) -> None:
        mine = self.workers[tick::TICKS]  # the workers whose minute comes round this tick
        if mine:
            ask(mine)

    def _controller(self, tick: int, share: RedisShare | None) -> None:
        bridge = bridge_of(self.board.on(self.host))
        poller = Poller(share, self.host) if share is not None else None
        if tick == 0:
            bridge.tagged("mbf-bench-", poller, since=time.time())
        if tick == 1:
            for _ in range(self.monitors):
                monitor_pass(self.board, share=share or PerCall())
        if tick == 2:
            for _ in range(self.listings):
                live.sweep(self.board, timeout=None, share=share or PerCall())
