"""Tasks appended to a live run: the driving coordinator's inbox and the append's handshake.

Why a lock and an inbox in Redis: ``runs append`` runs in another process than the
coordinator driving the run, and the two meet at the run's end. An append must either be
seen by that coordinator before it finishes, or find the run ended (and continue it as a
finished run): never both, never neither. Both sides take the run's append lock
(``keys.run_append_lock``). Under it the appender writes the tasks to the run's receipts
(``run.tasks_appended``: durable, so a resume or a restart sees them exactly once) only
while the inbox is open; the coordinator, before it would finish, re-reads the receipts
under the same lock and either goes on with what was appended or closes the inbox. An
append that finds the inbox closed waits for the lease to go, then the run is ended.

Who takes appends (``keys.run_inbox``): the coordinator holding the run's lease that
opened the inbox (``integrate``, ``runs resume``, ``runs append``), recording into the
same workspace's run store (same host, same state directory). A lease held without an
inbox (a scan/tune/campaign child, driven by its parent's session) or an inbox writing
another workspace's store (the same run file run from another workspace on this broker)
cannot take them: the append is refused in one line. A broker that loses its data loses
the inbox with the lease; the coordinator's next lease refresh retakes the lease and puts
the inbox back as it last set it (``Lease.on_retake``).
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from mainboard import keys
from mainboard.errors import UserError
from mainboard.runs.store import RunHistory, RunStore
from mainboard.tasks.lease import Lease

LOCK_TTL_MS = 10_000
WAIT_S = 0.02  # between two tries of the lock, or two looks at a starting or ending run
ENDING_BUDGET_S = 120.0  # an append waits this long for a run to open its inbox or end
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then " \
           "return redis.call('DEL', KEYS[1]) end return 0"
STARTING, OPEN, CLOSED = "starting", "open", "closed"


@dataclass(frozen=True)
class Appended:
    """What ``runs append`` did: ``live`` when the coordinator driving the run took the
    tasks (``by`` names it); else they wait in the receipts for ``runs resume``."""

    run_id: str
    tasks: int
    live: bool
    by: str | None = None


def _here(store: RunStore) -> dict[str, str]:
    """This workspace's run store, as an inbox names it."""
    return {"host": socket.gethostname(), "store": str(store.root.resolve())}


def _who(token: str) -> str:
    host, _, rest = token.partition(":")
    return f"pid {rest.partition(':')[0]} on {host}"


@contextmanager
def append_lock(r: redis.Redis, run_id: str, budget_s: float = 3 * LOCK_TTL_MS / 1000
                ) -> Iterator[None]:
    """The run's append lock, held by one appender or the run's end at a time (a holder
    that died lets go after LOCK_TTL_MS)."""
    key, token = keys.run_append_lock(run_id), uuid.uuid4().hex
    deadline = time.monotonic() + budget_s
    while not r.set(key, token, nx=True, px=LOCK_TTL_MS):
        if time.monotonic() > deadline:
            raise UserError(f"run {run_id}: could not take its append lock in "
                            f"{budget_s:.0f} s; try again")
        time.sleep(WAIT_S)
    try:
        yield
    finally:
        r.eval(_RELEASE, 1, key, token)


class Inbox:
    """The driving coordinator's side: ``starting`` once the lease is held, ``open`` while
    it runs tasks, ``closed`` once it decided to finish, gone with the lease."""

    def __init__(self, r: redis.Redis, store: RunStore, lease: Lease) -> None:
        self.r, self.store, self.lease = r, store, lease
        self.key = keys.run_inbox(lease.run_id)
        self.state: str | None = None  # as last set by this coordinator
        lease.on_retake.append(self.restore)

    def _value(self, state: str) -> str:
        return json.dumps({"token": self.lease.token, "state": state, **_here(self.store)})

    def _set(self, state: str) -> None:
        self.r.set(self.key, self._value(state))
        self.state = state

    def restore(self) -> None:
        """Put the inbox back as it was, if the broker lost it (the lease was retaken from
        nothing): else appends would be refused as if a parent drove the run."""
        if self.state is not None:
            self.r.set(self.key, self._value(self.state), nx=True)

    def acquire(self) -> None:
        """Take the run's lease and mark the inbox ``starting`` in one step (under the
        append lock): appends wait while the run is set up, its execution not yet
        recorded, and never see the lease without the inbox."""
        with append_lock(self.r, self.lease.run_id):
            self.lease.acquire()
            self._set(STARTING)

    def open(self) -> None:
        """Appends are recorded for this coordinator from now on."""
        with append_lock(self.r, self.lease.run_id):
            self._set(OPEN)

    def take(self, known: int) -> RunHistory | None:
        """Before finishing: the run's history when more than ``known`` tasks were appended
        (the inbox stays open); else None and the inbox is closed, so a later append waits
        for the run to end and continues it then."""
        with append_lock(self.r, self.lease.run_id):
            # snapshot-free first: at every run's end, a read of all its snapshots cost more
            # than a short run's iterations
            light = self.store.history(self.lease.run_id, snapshots=False)
            if light is not None and len(light.appended) > known:
                return self.store.history(self.lease.run_id)
            self._set(CLOSED)
            return None

    def close(self) -> None:
        """Closed (the run halted, failed or finished): an append waits for the lease."""
        raw = self.r.get(self.key)
        if raw is not None and json.loads(raw).get("token") == self.lease.token:
            self._set(CLOSED)

    def shut(self) -> None:
        """Gone, after the lease was let go (only if still this coordinator's): an append
        never sees the lease held without the inbox of its holder."""
        raw = self.r.get(self.key)
        if raw is not None and json.loads(raw).get("token") == self.lease.token:
            self.r.eval(_RELEASE, 1, self.key, raw)


def _inbox(r: redis.Redis, run_id: str) -> dict[str, Any] | None:
    raw = r.get(keys.run_inbox(run_id))
    return None if raw is None else json.loads(raw)


def offer(r: redis.Redis, store: RunStore, run_id: str,
          record: Callable[[RunHistory], int]) -> Appended | None:
    """Hand tasks to the coordinator driving ``run_id``: ``record(history)`` writes them
    (and says how many) under the append lock while its inbox is open. None when no
    coordinator drives the run (the caller takes the lease); UserError (one line) when the
    one that does cannot take them."""
    deadline = time.monotonic() + ENDING_BUDGET_S
    while True:
        with append_lock(r, run_id):
            raw = r.get(keys.run_lease(run_id))
            if raw is None:
                return None
            holder, inbox = raw.decode(), _inbox(r, run_id)
            if inbox is None or inbox.get("token") != holder:
                raise UserError(
                    f"run {run_id} is driven by {_who(holder)}, a coordinator that does not "
                    "take appended tasks (a scan/tune/campaign parent drives it as a child); "
                    f"append once it has ended, or `mainboard runs pause {run_id}` first")
            if {k: inbox.get(k) for k in ("host", "store")} != _here(store):
                raise UserError(
                    f"run {run_id} is driven by {_who(holder)} from another workspace (run "
                    f"store {inbox.get('store')} on {inbox.get('host')}), which never sees "
                    "tasks appended here; append them there")
            if inbox.get("state") == OPEN:
                history = store.history(run_id)
                if history is None:
                    raise UserError(f"run {run_id} has no receipts in {store.root}")
                return Appended(run_id, record(history), live=True, by=_who(holder))
        # starting, or ending: wait for the inbox to open or the lease to go
        while r.get(keys.run_lease(run_id)) == raw and \
                (_inbox(r, run_id) or {}).get("state") != OPEN:
            if time.monotonic() > deadline:
                raise UserError(f"run {run_id} is still starting or ending after "
                                f"{ENDING_BUDGET_S:.0f} s; try again")
            time.sleep(WAIT_S)


__all__ = ["Appended", "Inbox", "append_lock", "offer"]
