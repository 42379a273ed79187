"""Jobs on provider hosts: reach the host's live job rental, renting one only to submit work.

A ``kind = "provider"`` host is a machine only while a rental runs. Submitting a job
reuses the host's live rental owned by its jobs (``owner = "jobs"`` in
``.mainboard/rentals.ndjson``), else rents the cheapest offer within ``max_usd_hr``
inside a ``RentalGuard``, so a rental that never answers is destroyed and recorded as
such. A rental ``fleet up`` made for a worker on the same host is never used for jobs:
the monitor ends job rentals when their jobs are done, and must never take a worker's
machine with them. Asking about work already submitted never rents: a host without a
live job rental is an error then (a rental recorded before owners were, ``owner``
None, is still asked about work it may run, never given new work).
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mainboard.bridges.providers import RentalGuard, adapter_for, owned_rentals
from mainboard.bridges.providers.base import ProviderAdapter, Rental
from mainboard.bridges.providers.bridge import known_hosts_for, rental_transport
from mainboard.bridges.providers.lifecycle import JOBS
from mainboard.bridges.ssh import SshTransport
from mainboard.config import Config, ProviderHost
from mainboard.errors import HostError, HostUnreachable, ProviderError
from mainboard.hosts.leases import rentals_locked
from mainboard.hosts.root import ensure_root
from mainboard.ids import safe_word
from mainboard.receipts import RentalCreated
from mainboard.statedir import fleet_dir, manifest_path

RENT_WAIT_S = 300.0


def rental_key(state_dir: Path) -> tuple[str, str]:
    """(private key path, public key line) of the workspace's key for rented machines.

    Made once with ``cryptography`` (a paramiko dependency), mode 0600; providers get
    only the public half.
    """
    path = fleet_dir(state_dir) / "id_ed25519"
    pub = path.with_suffix(".pub")
    if not path.exists() or not pub.exists():
        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(private)
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH)
        pub.write_bytes(public + b" mainboard-fleet\n")
    return str(path), pub.read_text().strip()


def adapter(config: Config, host: ProviderHost) -> ProviderAdapter:
    """The adapter of the ``[providers.X]`` a provider host names."""
    return adapter_for(host.provider, config.providers[host.provider])



def rent_cheapest(guard: RentalGuard, config: Config, name: str, host: ProviderHost,
                  public_key: str, tag: str | None = None, cap: float | None = None) -> Rental:
    """Rent the cheapest offer within the host's ``max_usd_hr`` (and ``cap``: what a fleet
    pool's own limit leaves) inside ``guard`` and wait until it runs; the guard destroys it
    if what follows fails. ``tag`` (the fleet's owner tag) ends the label, so the
    provider's own listing tells whose the rental is."""
    limit = min((x for x in (host.max_usd_hr, cap) if x is not None), default=None)
    offer = guard.adapter.cheapest(host.gpu, limit)
    return guard.rent(offer, ssh_public_key=public_key, max_usd_hr=limit,
                      label=f"mainboard-{safe_word(name)}" + (f"-{tag}" if tag else ""),
                      image=config.providers[host.provider].image, wait=RENT_WAIT_S)



def live_rental(market: ProviderAdapter, state_dir: Path, name: str, *,
                legacy: bool = False) -> Rental | None:
    """The newest rental of host ``name`` owned by its jobs that the provider says is
    running, if any; ``legacy`` also accepts one recorded without an owner."""
    owners: tuple[str | None, ...] = (JOBS, None) if legacy else (JOBS,)
    found = [r for r in owned_rentals(state_dir, owners)
             if r.host == name and r.provider == market.name]
    newest_first = found[::-1]
    for owned in [r for r in newest_first if r.owner == JOBS] + [
            r for r in newest_first if r.owner != JOBS]:
        rental = market.status(owned.rental_id)
        if rental.state == "running" and rental.ssh_host and rental.ssh_port:
            return rental
    return None


def provider_transport(config: Config, name: str, host: ProviderHost, root: str, *,
                       rent: bool) -> SshTransport:
    """An ssh transport to host ``name``'s live job rental; with ``rent``, one is rented
    (owned by the jobs) if none. A fleet worker's rental of the same host is never used.

    One process at a time finds-or-rents (``.mainboard/rentals.lock``), so concurrent
    submits share one machine instead of renting two.
    """
    market = adapter(config, host)
    identity, public = rental_key(config.state_dir)
    with rentals_locked(config.state_dir):
        try:
            rental = live_rental(market, config.state_dir, name, legacy=not rent)
        except ProviderError as exc:
            if rent:
                raise
            # Unreachable for now, not a verdict: the monitor asks (and pulls) again later,
            # and never releases a rental whose outputs have not come back.
            raise HostUnreachable(f"host {name!r}: provider {host.provider!r} cannot say "
                                  f"where its rental is right now ({exc})") from exc
        if rental is not None:
            return _attach(config, name, host, rental, identity)
        if not rent:
            raise HostError(f"host {name!r}: no live rental on provider {host.provider!r} "
                            "(it was released or destroyed); its jobs cannot be asked about")
        with RentalGuard(market, config.state_dir, host=name, owner=JOBS) as guard:
            rental = rent_cheapest(guard, config, name, host, public)
            transport = _attach(config, name, host, rental, identity)
            ensure_root(transport, name, root)  # proves ssh works; a failure destroys it
        return transport


def _marker(config: Config, name: str) -> Path:
    """The file naming the rental host ``name``'s mirror (and transport) were last on."""
    return manifest_path(config.state_dir, name).with_suffix(".rental")


def attached_rental(config: Config, name: str) -> RentalCreated | None:
    """The live rental host ``name``'s transport last attached to, as recorded when it was
    rented (its ``usd_hr`` is what the provider bills for it); None when there is none."""
    marker = _marker(config, name)
    rental_id = marker.read_text() if marker.exists() else None
    found = [r for r in owned_rentals(config.state_dir)
             if r.host == name and r.rental_id == rental_id]
    return found[-1] if found else None


def _attach(config: Config, name: str, host: ProviderHost, rental: Rental,
            identity: str) -> SshTransport:
    """The rental's transport; a rental the workspace mirror has not seen forgets the mirror."""
    marker = _marker(config, name)
    if not marker.exists() or marker.read_text() != rental.id:
        # A fresh machine holds none of what the manifest says the last one had.
        manifest_path(config.state_dir, name).unlink(missing_ok=True)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(rental.id)
    return rental_transport(rental, name=name, identity=identity,
                            known_hosts=known_hosts_for(config.state_dir, host.provider,
                                                        rental.id))
