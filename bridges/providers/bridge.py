"""The provider bridge: jobs on a rented GPU machine, as detached processes over ssh.

Renting is the lifecycle's business (``RentalGuard``); once a rental runs, the machine
is an ssh host without a scheduler, so jobs are the ``ProcessBridge``'s detached
processes reached through an ``SshTransport`` to the rental's address. A fresh
rental's host key cannot be known in advance, so it is trusted on first use and pinned
in a known_hosts file of its own: providers recycle addresses, and a key pinned for
an earlier rental must not refuse (or, worse, vouch for) the next one.
"""

from __future__ import annotations

import re
from pathlib import Path

from mainboard.config import ProviderHost
from mainboard.errors import ProviderError

from ..local import ProcessBridge
from ..ssh import SshTransport
from .base import Rental

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def known_hosts_for(state_dir: Path, provider: str, rental_id: str) -> Path:
    """The known_hosts file pinning one rental's host key (under the workspace state dir)."""
    name = _SAFE.sub("_", f"{provider}-{rental_id}")
    return Path(state_dir) / "rentals" / f"{name}.known_hosts"


def rental_transport(rental: Rental, *, name: str, identity: str, known_hosts: Path,
                     connect_timeout: float = 10.0) -> SshTransport:
    """An ssh transport to a running rental (host key trusted on first use, then pinned)."""
    if rental.state != "running" or not rental.ssh_host or not rental.ssh_port:
        raise ProviderError(f"{name}: rental {rental.id} is {rental.state} without an ssh "
                            "address yet; wait for it (ProviderAdapter.wait_ready)")
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    return SshTransport(rental.ssh_host, port=rental.ssh_port, user=rental.ssh_user,
                        identity=identity, trust="first-use", known_hosts=str(known_hosts),
                        connect_timeout=connect_timeout, name=name)


class ProviderBridge(ProcessBridge):
    """Jobs on one rented machine (``kind = "provider"`` hosts), over ssh."""

    kind = "provider"

    def __init__(self, name: str, host: ProviderHost, rental: Rental, *, identity: str,
                 known_hosts: Path, root: str | None = None,
                 connect_timeout: float = 10.0) -> None:
        transport = rental_transport(rental, name=name, identity=identity,
                                     known_hosts=known_hosts, connect_timeout=connect_timeout)
        super().__init__(name, host, transport, root=root)
        self.rental = rental
