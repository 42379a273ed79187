"""Fleet workers on rented machines: rent the cheapest fitting offer, start, never leak it.

The rental happens inside a ``RentalGuard``: if anything after it fails (the machine
never answers, the root cannot be made, provisioning or submitting breaks) the guard
destroys the rental and records that, so a failed ``fleet up`` costs nothing more. A
rental that worked stays, recorded in both the rental receipts (``owner = "fleet"``)
and the fleet receipts, until ``fleet down`` or the keeper's idle check destroys it:
jobs on the same host never use it and the monitor never releases it.
"""

from __future__ import annotations

from mainboard.bridges.providers import RentalGuard
from mainboard.bridges.providers.base import ProviderAdapter, Rental
from mainboard.bridges.providers.bridge import ProviderBridge, known_hosts_for, rental_transport
from mainboard.bridges.providers.lifecycle import FLEET
from mainboard.bridges.ssh import SshTransport
from mainboard.config import Config, ProviderHost, parse_duration
from mainboard.errors import ConfigError
from mainboard.fleet.launch import Launcher, Target, new_worker_id, ssh_dict
from mainboard.fleet.records import owner_tag
from mainboard.hosts.mirror import Mirror
from mainboard.hosts.rentals import adapter, rent_cheapest, rental_key
from mainboard.hosts.root import ensure_root
from mainboard.receipts import WorkerStarted
from mainboard.statedir import manifest_path
from mainboard.tasks import BATCH_QUEUE

DEFAULT_IDLE_TIMEOUT_S = 1800.0
def idle_timeout_for(config: Config, host: ProviderHost, override: float | None) -> float:
    """``--idle-timeout``, else ``[providers.X] options.idle_timeout``, else 30 minutes."""
    if override is not None:
        return float(override)
    raw = config.providers[host.provider].options.get("idle_timeout")
    if raw is None:
        return DEFAULT_IDLE_TIMEOUT_S

    try:
        seconds = parse_duration(raw)
    except ConfigError as exc:
        raise ConfigError("not a duration", file=str(config.path or "mainboard.toml"),
                          key=f"providers.{host.provider}.options.idle_timeout", value=raw,
                          valid=exc.valid) from None
    return float(seconds)


def mirror_fresh(config: Config, name: str, transport: SshTransport, root: str,
                 rental_id: str) -> None:
    """The workspace onto a machine just rented, before its worker takes a run's batches
    (a pool grown from zero mid-run: nothing was there to sync before the run). Each rental
    keeps its own manifest (``sync_fleet`` updates every one before a run); a fresh machine
    holds nothing."""
    manifest_path(config.state_dir, name, rental_id).unlink(missing_ok=True)
    Mirror(config, name, transport, root, env=config.host(name).env, machine=rental_id).sync()


def fleet_guard(market: ProviderAdapter, config: Config, name: str) -> RentalGuard:
    """The guard a fleet worker's rental is made in: recorded as the fleet's own."""
    return RentalGuard(market, config.state_dir, host=name, owner=FLEET)


def start_rented(launcher: Launcher, name: str) -> WorkerStarted:
    """Rent for provider host ``name``, then start its worker; any failure destroys the rental."""
    config = launcher.config
    host = config.host(name)
    assert isinstance(host, ProviderHost)
    idle = idle_timeout_for(config, host, launcher.options.idle_timeout)
    market = adapter(config, host)
    identity, public = rental_key(config.state_dir)
    worker_id = new_worker_id()
    launcher.intent(worker_id, name)  # before the rental: a killed controller's is found
    with fleet_guard(market, config, name) as guard:
        with launcher.phase(name, "rent"):
            rental = rent_cheapest(guard, config, name, host, public,
                                   tag=owner_tag(config.state_dir, worker_id),
                                   cap=launcher.usd_hr_cap)
        known = known_hosts_for(config.state_dir, host.provider, rental.id)
        transport = rental_transport(rental, name=name, identity=identity, known_hosts=known)
        with launcher.phase(name, "connect"):
            root = ensure_root(transport, name, host.root)
        if BATCH_QUEUE in launcher.options.queues:
            with launcher.phase(name, "sync"):
                mirror_fresh(config, name, transport, root, rental.id)

        def make(root_dir: str, rental: Rental = rental) -> ProviderBridge:
            return ProviderBridge(name, host, rental, identity=identity, known_hosts=known,
                                  root=root_dir)

        target = Target(name, host, transport, root, make, ssh_dict(transport),
                        {"provider": host.provider, "rental_id": rental.id})
        return launcher.start(target, idle_timeout=idle, worker_id=worker_id)
