"""Leases a submit holds on a provider host's job rentals until its job is recorded.

A submit that reuses a host's job rental has no ``job.submitted`` receipt yet, so to a
monitor pass in between the rental looks idle (every job on it done) and would be
destroyed under the new job. So a submit takes a lease on the host first: a small JSON
file in ``.mainboard/rental-leases/`` with an expiry, written while holding
``rentals.lock``, the lock every find-or-rent and every monitor release takes. Under that
lock the monitor leaves alone every job rental of a host with an unexpired lease, and a
lease is dropped only after the job's receipt is written, so the monitor then sees the
job instead. A crashed submit's lease stops counting when it expires (and the next look
removes it), so it never pins a rental forever; a live submit renews its lease between
its phases (environment, data, scheduler).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from mainboard.ids import safe_word
from mainboard.locks import flocked

LOCK_FILE = "rentals.lock"  # held to find-or-rent a job rental, take a lease, or release one
LEASES = "rental-leases"
LEASE_S = 1800.0  # a submit's phases (env build, data) renew it; a crashed one's expires


def rentals_locked(state_dir: Path) -> AbstractContextManager[bool]:
    """The one lock of the job rentals (``.mainboard/rentals.lock``), blocking."""
    return flocked(Path(state_dir) / LOCK_FILE)


@dataclass
class Lease:
    """One submit's hold on host ``host``'s job rentals, until ``expires`` (epoch seconds)."""

    path: Path
    host: str
    expires: float

    def renew(self, ttl: float = LEASE_S) -> None:
        """Push the expiry ``ttl`` seconds ahead (a long phase of a live submit is done)."""
        self.expires = time.time() + ttl
        _write(self.path, self.host, self.expires)

    def drop(self) -> None:
        """Let go: the job is recorded (or the submit failed); the monitor may judge again."""
        self.path.unlink(missing_ok=True)


def _write(path: Path, host: str, expires: float) -> None:
    """Write the lease whole (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"host": host, "pid": os.getpid(), "expires": expires}))
    os.replace(tmp, path)


def take_lease(state_dir: Path, host: str, ttl: float = LEASE_S) -> Lease:
    """A new lease on ``host``'s job rentals, written under ``rentals.lock``."""
    folder = Path(state_dir) / LEASES
    folder.mkdir(parents=True, exist_ok=True)
    lease = Lease(folder / f"{safe_word(host)}.{os.getpid()}.{uuid.uuid4().hex[:12]}.json",
                  host, time.time() + ttl)
    with rentals_locked(state_dir):
        _write(lease.path, host, lease.expires)
    return lease


def leased_hosts(state_dir: Path, now: float | None = None) -> set[str]:
    """Hosts with an unexpired lease; expired (or unreadable) lease files are removed.

    Call it holding :func:`rentals_locked`, so no lease is taken while the answer is used.
    """
    folder = Path(state_dir) / LEASES
    if not folder.is_dir():
        return set()
    moment = time.time() if now is None else now
    held: set[str] = set()
    for path in folder.glob("*.json"):
        try:
            lease = json.loads(path.read_text())
            host, expires = str(lease["host"]), float(lease["expires"])
        except FileNotFoundError:
            continue  # dropped while we looked
        except (OSError, ValueError, KeyError, TypeError):
            host, expires = "", 0.0  # not a lease we can read: it protects nothing
        if expires > moment:
            held.add(host)
        else:
            path.unlink(missing_ok=True)
    return held


@contextmanager
def holding(state_dir: Path, host: str, ttl: float = LEASE_S) -> Iterator[Lease]:
    """A lease on ``host``'s job rentals for the ``with`` block, dropped however it ends."""
    lease = take_lease(state_dir, host, ttl)
    try:
        yield lease
    finally:
        lease.drop()
