"""What a provider pool costs: the offers it actually rented, and the one it would rent next.

Why: a pool's ``max_usd_hr`` and ``budget_usd`` are about money really spent, so they are
judged on the prices recorded in the rental receipts (``rental.created``: the price of
the offer rented), never on the host's declared ``max_usd_hr`` (a ceiling per machine,
often well above what is paid). The decision to rent one more takes the price of the
offer that would be rented: the cheapest offer that fits the host, as ``rent_cheapest``
takes it. The keeper's autoscaler and the metrics scrape read the same numbers here.
"""

from __future__ import annotations

import time

from mainboard.bridges.providers.lifecycle import rental_receipts
from mainboard.config import Config, ProviderHost
from mainboard.fleet.records import FleetState
from mainboard.hosts.rentals import adapter
from mainboard.receipts import RentalCreated, RentalDestroyed, WorkerStarted


def pool_of(worker: WorkerStarted) -> str:
    """A worker's pool label: its ``[fleet.pools.NAME]``, else the one-off pool of its host
    (``fleet up --on HOST`` names that pool after the host)."""
    return worker.pool or worker.host


def spend(config: Config, state: FleetState) -> tuple[dict[str, float], dict[str, float]]:
    """Per provider pool: USD per hour of its rentals alive now, and USD spent so far
    (each rental at its own price from its ``rental.created`` receipt to its
    ``rental.destroyed`` one, or now). A rental destroyed because its worker never
    started (``fleet up`` failed after renting) has no worker, so no pool: not counted."""
    pools: dict[tuple[str, str], str] = {}  # (provider, rental id) -> pool
    rented_for: set[str] = set()
    for worker in state.started.values():
        if worker.rental:
            pools[(worker.rental["provider"], worker.rental["rental_id"])] = pool_of(worker)
    for name, pool in config.fleet.pools.items():
        if isinstance(config.host(pool.host), ProviderHost):
            rented_for.add(name)
    rentals: dict[tuple[str, str], tuple[float, RentalCreated]] = {}
    ended: dict[tuple[str, str], float] = {}
    for ts, payload in rental_receipts(config.state_dir).read_timed():
        if isinstance(payload, RentalCreated):
            rentals[(payload.provider, payload.rental_id)] = (ts, payload)
        elif isinstance(payload, RentalDestroyed):
            ended[(payload.provider, payload.rental_id)] = ts
    now = time.time()
    rented_for |= set(pools.values())
    usd_hr = dict.fromkeys(sorted(rented_for), 0.0)
    spent = dict(usd_hr)
    for rental_id, (began, created) in rentals.items():
        pool = pools.get(rental_id)
        if pool is None:
            continue  # a job's rental, or one that never got its worker
        stop = ended.get(rental_id)
        if stop is None:
            usd_hr[pool] += created.usd_hr
        spent[pool] += created.usd_hr * max(0.0, (stop or now) - began) / 3600
    return usd_hr, spent


def next_price(config: Config, host: ProviderHost) -> float | None:
    """USD per hour of the offer the next rental of ``host`` would take (the cheapest that
    fits its ``gpu`` and ``max_usd_hr``, as ``rent_cheapest`` picks); None: none fits now
    (renting would fail, and that failure is recorded like any failed submission)."""
    offers = adapter(config, host).offers(host.gpu, host.max_usd_hr)
    return offers[0].usd_hr if offers else None


__all__ = ["next_price", "pool_of", "spend"]
