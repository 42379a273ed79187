"""Fleet workers on rented machines: rent the cheapest fitting offer, start, never leak it.

The rental happens inside a ``RentalGuard``: if anything after it fails (the machine
never answers, the root cannot be made, provisioning or submitting breaks) the guard
destroys the rental and records that, so a failed ``fleet up`` costs nothing more. A
rental that worked stays, recorded in both the rental and the fleet receipts, until
``fleet down``, ``monitor`` or the keeper's idle check destroys it.
"""

from __future__ import annotations

import os
from pathlib import Path

from mainboard.bridges.providers import RentalGuard, adapter_for
from mainboard.bridges.providers.base import ProviderAdapter, Rental
from mainboard.bridges.providers.bridge import ProviderBridge, known_hosts_for, rental_transport
from mainboard.config import Config, ProviderHost
from mainboard.errors import ConfigError
from mainboard.fleet_launch import Launcher, Target, ensure_root, ssh_dict
from mainboard.fleet_records import fleet_dir, safe_word
from mainboard.receipts import WorkerStarted

DEFAULT_IDLE_TIMEOUT_S = 1800.0
RENT_WAIT_S = 300.0


def fleet_key(state_dir: Path) -> tuple[str, str]:
    """(private key path, public key line) of the workspace's key for rented machines.

    Made once with ``cryptography`` (a paramiko dependency), mode 0600; providers get
    only the public half.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

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


def idle_timeout_for(config: Config, host: ProviderHost, override: float | None) -> float:
    """``--idle-timeout``, else ``[providers.X] options.idle_timeout``, else 30 minutes."""
    if override is not None:
        return float(override)
    raw = config.providers[host.provider].options.get("idle_timeout")
    if raw is None:
        return DEFAULT_IDLE_TIMEOUT_S
    from mainboard.config import parse_duration

    try:
        seconds = parse_duration(raw)
    except ConfigError as exc:
        raise ConfigError("not a duration", file=str(config.path or "mainboard.toml"),
                          key=f"providers.{host.provider}.options.idle_timeout", value=raw,
                          valid=exc.valid) from None
    return float(seconds)


def start_rented(launcher: Launcher, name: str) -> WorkerStarted:
    """Rent for provider host ``name``, then start its worker; any failure destroys the rental."""
    config = launcher.config
    host = config.host(name)
    assert isinstance(host, ProviderHost)
    idle = idle_timeout_for(config, host, launcher.options.idle_timeout)
    market = adapter(config, host)
    offer = market.cheapest(host.gpu, host.max_usd_hr)
    identity, public = fleet_key(config.state_dir)
    with RentalGuard(market, config.state_dir, host=name) as guard:
        with launcher.phase(name, "rent"):
            rental = guard.rent(offer, ssh_public_key=public, max_usd_hr=host.max_usd_hr,
                                label=f"mainboard-{safe_word(name)}",
                                image=config.providers[host.provider].image, wait=RENT_WAIT_S)
        known = known_hosts_for(config.state_dir, host.provider, rental.id)
        transport = rental_transport(rental, name=name, identity=identity, known_hosts=known)
        with launcher.phase(name, "connect"):
            root = ensure_root(transport, name, host.root)

        def make(root_dir: str, rental: Rental = rental) -> ProviderBridge:
            return ProviderBridge(name, host, rental, identity=identity, known_hosts=known,
                                  root=root_dir)

        target = Target(name, host, transport, root, make, ssh_dict(transport),
                        {"provider": host.provider, "rental_id": rental.id})
        return launcher.start(target, idle_timeout=idle)
