"""One coordinator per run: a TTL key in Redis naming host and pid, refreshed while it works.

Why a lease and not a lock file: coordinators of one run may start on different machines
(a laptop, a login node); Redis is the one place they all see. A holder that died on this
host is taken over at once; elsewhere its lease lapses ``LEASE_TTL_S`` after it stops.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable

import redis

from mainboard import keys
from mainboard.daemon import pid_alive
from mainboard.errors import IntegrationFailed, UserError

LEASE_TTL_S = 10
_REFRESH = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if not holder then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) return 2 end
return 0
"""
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then " \
           "return redis.call('DEL', KEYS[1]) end return 0"



class Lease:
    """One coordinator per run: a TTL key naming host and pid, refreshed while it works."""

    def __init__(self, r: redis.Redis, run_id: str) -> None:
        self.r, self.run_id, self.key = r, run_id, keys.run_lease(run_id)
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.held = False
        # Called after the lease was retaken from nothing: a broker that lost its data (a
        # restart without persistence, a failover to a lagging replica) lost what the
        # holder keeps beside the lease too (the run's append inbox), which they put back.
        self.on_retake: list[Callable[[], None]] = []

    def acquire(self) -> None:
        """Take the lease; a dead holder on this host is taken over, a live one refused."""
        for _ in range(3):
            if self.r.set(self.key, self.token, nx=True, ex=LEASE_TTL_S):
                self.held = True
                return
            raw = self.r.get(self.key)
            if raw is None:
                continue
            host, _, rest = raw.decode().partition(":")
            pid = int(rest.partition(":")[0] or 0)
            if host == socket.gethostname() and not pid_alive(pid):
                self.r.register_script(_RELEASE)(keys=[self.key], args=[raw])
                continue
            raise UserError(f"run {self.run_id} is being coordinated by pid {pid} on {host}; "
                            f"wait for it to finish (its lease lapses {LEASE_TTL_S}s after it "
                            "stops), then `mainboard runs resume`")
        raise UserError(f"could not take the lease of run {self.run_id}; try again")

    def refresh(self) -> None:
        """Extend (or, if it lapsed unclaimed, retake) the lease; another holder is fatal."""
        done = self.r.register_script(_REFRESH)(keys=[self.key], args=[self.token, LEASE_TTL_S])
        if not done:
            raise IntegrationFailed(f"run {self.run_id}: lost the coordinator lease "
                                    "(another coordinator took the run over)")
        if done == 2:
            for follow in self.on_retake:
                follow()

    def release(self) -> None:
        """Give the lease back (only if still ours)."""
        self.r.register_script(_RELEASE)(keys=[self.key], args=[self.token])
        self.held = False


__all__ = ["LEASE_TTL_S", "Lease"]
