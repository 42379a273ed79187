"""A worker's claim on a batch attempt: a short-TTL key saying "this worker is running this
attempt", which the coordinator's liveness watch reads (a claim that runs out means its
worker is gone, and the batch is sent again), kept alive while held by one heartbeat thread
per process.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis

CLAIM_TTL_MS = 3000  # a claim not refreshed for this long means its worker is gone
HEARTBEAT_S = 1.0


class _Heartbeat:
    """One thread per process keeps every claim of the process alive.

    Why one: a thread per claim cost a start and a join per task, about 0.5 ms of a small
    bundle's 6 ms. A claim is refreshed under the lock, so once :meth:`drop` returns it is
    never set again. A forked child starts with none (``os.register_at_fork``)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """No claims and no thread (a new process)."""
        self.lock = threading.Lock()
        self.claims: dict[str, Claim] = {}
        self.thread: threading.Thread | None = None

    def add(self, claim: Claim) -> None:
        with self.lock:
            self.claims[claim.key] = claim
            if self.thread is None:
                self.thread = threading.Thread(target=self._beat, name="claims heartbeat",
                                               daemon=True)
                self.thread.start()

    def drop(self, claim: Claim) -> None:
        with self.lock:
            self.claims.pop(claim.key, None)

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            with self.lock:
                for claim in list(self.claims.values()):
                    try:
                        claim.r.set(claim.key, claim.holder, px=CLAIM_TTL_MS)
                    except redis.RedisError:  # a missed beat only risks a harmless duplicate
                        pass


_HEARTBEAT = _Heartbeat()
os.register_at_fork(after_in_child=_HEARTBEAT.reset)


class Claim:
    """A short-TTL key saying "this worker is running this attempt", kept alive by the
    process's heartbeat while held."""

    def __init__(self, r: redis.Redis, key: str, holder: str) -> None:
        self.r, self.key, self.holder = r, key, holder
        self.staked = False  # set already, in the round trip of the task's load

    def stake(self, pipe: Any) -> None:
        """Set the claim in the caller's pipeline (:meth:`StageContext.load`'s round trip)."""
        pipe.set(self.key, self.holder, px=CLAIM_TTL_MS)
        self.staked = True

    def __enter__(self) -> Claim:
        if not self.staked:
            self.r.set(self.key, self.holder, px=CLAIM_TTL_MS)
        _HEARTBEAT.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _HEARTBEAT.drop(self)
