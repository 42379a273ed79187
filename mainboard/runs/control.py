"""Run control from any process: pause, stop, remove; and the broker a run lives on.

Why a flag in the run's state hash and not a Celery broadcast: the coordinator already
polls Redis between batches, workers read the same hash before sampling a batch, and a
flag survives a coordinator that is busy merging. The coordinator honours it at the next
batch boundary (``mainboard.tasks.coordinator``) and writes the receipt; this module
only asks and waits for the answer.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass

import redis

from mainboard import keys
from mainboard.config import Config
from mainboard.config.brokerurl import BROKER_URL_ENV
from mainboard.errors import RunIsRunning, RunNotRunning, UserError
from mainboard.redisclient import redis_client
from mainboard.runs.store import RunHistory, RunStore
from mainboard.services.broker import EmbeddedBroker, check_broker

WAIT_S = 120.0


def connect(config: Config) -> redis.Redis | None:
    """A client of the broker runs live on, checked; None when the embedded broker (the
    only one configured) is not running, so no run can be live and nothing is in Redis.

    Never starts a broker: reading logs or pausing must not create one.
    """
    url = os.environ.get(BROKER_URL_ENV, "").strip() or config.broker.url
    if not url:
        embedded = EmbeddedBroker(config.state_dir)
        if not embedded.status().running:
            return None
        url = embedded.url()
    check_broker(url, config)
    return redis_client(url, socket_timeout=10, socket_connect_timeout=5)


def live(r: redis.Redis | None, run_id: str) -> bool:
    """True while a coordinator holds the run's lease."""
    return r is not None and bool(r.exists(keys.run_lease(run_id)))


@dataclass(frozen=True)
class Outcome:
    """How a pause or stop request ended: the run's status and iterations done."""

    run_id: str
    status: str
    iteration: int


def request(r: redis.Redis | None, store: RunStore, history: RunHistory, control: str,
            *, wait_s: float = WAIT_S) -> Outcome:
    """Ask the coordinator of a running run to ``pause`` or ``stop``; wait for its answer."""
    if control not in keys.RUN_CONTROLS:
        raise UserError(f"unknown run control {control!r}; valid: {', '.join(keys.RUN_CONTROLS)}")
    run_id = history.run_id
    if not live(r, run_id):
        raise RunNotRunning(f"run {run_id} ({history.created.name}) is not running (status "
                            f"{history.status}); nothing to {control}"
                            + ("; `mainboard runs resume` continues it"
                               if history.status in ("paused", "stopped", "unfinished") else ""))
    assert r is not None
    r.hset(keys.run_state(run_id), "control", control)
    deadline = time.monotonic() + wait_s
    while live(r, run_id):
        if time.monotonic() >= deadline:
            raise UserError(f"run {run_id} did not {control} within {wait_s:.0f} s (its "
                            "batches in flight may be long); the request stays: it will "
                            f"{control} at the next batch boundary")
        time.sleep(0.1)
    now = store.history(run_id) or history
    return Outcome(run_id, now.status, now.last_snapshot[0])


def remove(r: redis.Redis | None, store: RunStore, history: RunHistory) -> int:
    """Delete a run's receipts and every Redis key of it, and a parent's child runs with it
    (they exist only as its points); refused while any of them runs.

    Returns how many Redis keys went.
    """
    family = [history, *(child for child in (store.history(c) for c in child_ids(history))
                         if child is not None)]
    for member in family:
        if live(r, member.run_id):
            what = "run" if member is history else f"child run of {history.run_id}:"
            raise RunIsRunning(f"{what} {member.run_id} ({member.created.name}) is running; "
                               f"pause or stop it first (`mainboard runs stop {member.run_id}`)")
    return sum(_remove_one(r, store, member.run_id) for member in family)


def child_ids(history: RunHistory) -> list[str]:
    """A parent's child run ids in the order they started (none for a plain run)."""
    return list(dict.fromkeys(item.child for item in history.children))


def _remove_one(r: redis.Redis | None, store: RunStore, run_id: str) -> int:
    gone = 0
    if r is not None:
        doomed = list(r.scan_iter(match=keys.run_pattern(run_id), count=500))
        doomed.append(keys.run_definition(run_id).encode())
        with r.pipeline(transaction=True) as pipe:
            pipe.delete(*doomed)
            pipe.zrem(keys.runs_index(), run_id)
            gone = int(pipe.execute()[0])
    shutil.rmtree(store.root / run_id, ignore_errors=True)
    return gone


__all__ = ["Outcome", "child_ids", "connect", "live", "remove", "request"]
