"""Rentals cost money until destroyed: record every one durably and never lose track of it.

``RentalGuard`` rents through an adapter and writes a ``rental.created`` receipt to
``STATE/rentals.ndjson`` the moment the provider answers, before anything else can
fail. Used as a context manager, any exception inside the ``with`` (waiting for the
machine, copying files, starting a worker) destroys the rentals made there and
records ``rental.destroyed``; a clean exit keeps them, owned, until ``fleet down``,
``monitor`` or the idle timeout destroys them. ``destroy_all_owned`` reads only the
receipts, so a new process (after a crash) finds and destroys what an old one rented.

Every rental records its ``owner``: ``JOBS`` (rented by a job submit, shared by that
host's jobs, released by the monitor once none of them is owed anything) or ``FLEET``
(rented for one fleet worker, ended by ``fleet down`` or the idle check). Neither side
ever reuses or ends the other's.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from pathlib import Path
from types import TracebackType

from mainboard.errors import ProviderError, UserError
from mainboard.receipts import Receipts, RentalCreated, RentalDestroyed

from .base import FINAL_STATES, Offer, ProviderAdapter, Rental, check_price

RECEIPTS_FILE = "rentals.ndjson"
JOBS = "jobs"    # owner: the jobs of the rental's host
FLEET = "fleet"  # owner: a fleet worker (its worker.started receipt names the rental)


def rental_receipts(state_dir: Path) -> Receipts:
    """The receipts log of rentals for a workspace state directory (``.mainboard``)."""
    return Receipts(Path(state_dir) / RECEIPTS_FILE)


def owned_rentals(state_dir: Path, owners: Collection[str | None] | None = None
                  ) -> list[RentalCreated]:
    """Rentals recorded as created and not yet recorded as destroyed, in creation order
    (only those whose ``owner`` is in ``owners``, when given)."""
    log = rental_receipts(state_dir)
    live: dict[tuple[str, str], RentalCreated] = {}
    for payload in log.read():
        if isinstance(payload, RentalCreated):
            live[(payload.provider, payload.rental_id)] = payload
        elif isinstance(payload, RentalDestroyed):
            live.pop((payload.provider, payload.rental_id), None)
    return [r for r in live.values() if owners is None or r.owner in owners]


class RentalGuard:
    """Rent through one adapter with a durable record; undo everything if setup fails."""

    def __init__(self, adapter: ProviderAdapter, state_dir: Path, *, host: str | None = None,
                 owner: str | None = None) -> None:
        self.adapter, self.host, self.owner = adapter, host, owner
        self.receipts = rental_receipts(state_dir)
        self.rented: list[Rental] = []  # made inside this guard and not destroyed since

    def rent(self, offer: Offer | str, *, ssh_public_key: str, label: str,
             image: str | None = None, max_usd_hr: float | None = None,
             wait: float | None = 300.0) -> Rental:
        """Check the price, rent, record, then (``wait`` seconds at most) wait until it runs.

        The price ceiling is checked against the provider's listing before ``rent`` is
        called, so an offer above ``max_usd_hr`` never costs anything.
        """
        chosen = offer if isinstance(offer, Offer) else self.adapter.offer(offer)
        check_price(chosen, max_usd_hr, self.adapter.name)
        rental = self.adapter.rent(chosen.id, ssh_public_key=ssh_public_key, label=label,
                                   image=image)
        self.receipts.append(RentalCreated(
            provider=self.adapter.name, rental_id=rental.id, offer_id=chosen.id, label=label,
            usd_hr=rental.usd_hr or chosen.usd_hr, host=self.host, owner=self.owner))
        self.rented.append(rental)
        if wait is not None:
            rental = self.adapter.wait_ready(rental.id, timeout=wait)
        return rental

    def destroy(self, rental_id: str, reason: str) -> None:
        """Destroy one rental (gone already is fine) and record it."""
        destroy_rental(self.adapter, self.receipts, rental_id, reason)
        self.rented = [r for r in self.rented if r.id != rental_id]

    def __enter__(self) -> RentalGuard:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            return
        reason = f"setup failed: {type(exc).__name__}: {exc}"[:500]
        for rental in list(self.rented):
            try:
                self.destroy(rental.id, reason)
            except Exception as undo:  # noqa: BLE001 - keep the original error, note this one
                exc.add_note(f"destroying rental {rental.id} on provider {self.adapter.name} "
                             f"failed: {undo}; run destroy_all_owned (fleet down) to retry")


def destroy_rental(adapter: ProviderAdapter, receipts: Receipts, rental_id: str,
                   reason: str, confirm_s: float = 60.0) -> None:
    """Destroy, wait until the provider no longer lists it, then write the receipt."""
    adapter.destroy(rental_id)
    deadline = time.monotonic() + confirm_s
    while (state := adapter.status(rental_id).state) != "destroyed":
        if time.monotonic() >= deadline:
            raise ProviderError(f"provider {adapter.name}: rental {rental_id} is still {state} "
                                f"{confirm_s:g}s after destroy")
        time.sleep(0.5)
    receipts.append(RentalDestroyed(provider=adapter.name, rental_id=rental_id, reason=reason))


def destroy_all_owned(state_dir: Path, adapters: Mapping[str, ProviderAdapter], *,
                      provider: str | None = None, label_prefix: str | None = None,
                      reason: str = "destroy_all_owned",
                      owners: Collection[str | None] | None = None) -> list[str]:
    """Destroy every rental the receipts say we own (optionally only one provider's, or
    only those of ``owners``, e.g. ``(FLEET, None)`` to leave the jobs' rentals alone).

    With ``label_prefix``, rentals the provider lists under that prefix are destroyed
    too, which catches one rented in the instant before its receipt was written (only
    rentals with no receipt at all: a recorded one of another owner is left alone). All
    are attempted; failures are raised together at the end. Returns the rental ids.
    """
    receipts = rental_receipts(state_dir)
    targets = [(r.provider, r.rental_id) for r in owned_rentals(state_dir, owners)
               if provider is None or r.provider == provider]
    recorded = {(r.provider, r.rental_id) for r in owned_rentals(state_dir)}
    if label_prefix:
        for name, adapter in adapters.items():
            if provider is None or name == provider:
                targets += [(name, r.id) for r in adapter.list_rentals(label_prefix)
                            if (name, r.id) not in targets and (name, r.id) not in recorded]
    done: list[str] = []
    failures: list[str] = []
    for name, rental_id in targets:
        adapter = adapters.get(name)
        if adapter is None:
            failures.append(f"rental {rental_id}: provider {name!r} is not configured "
                            f"(configured: {', '.join(sorted(adapters)) or 'none'})")
            continue
        try:
            destroy_rental(adapter, receipts, rental_id, reason)
            done.append(rental_id)
        except ProviderError as exc:
            failures.append(f"rental {rental_id}: {exc}")
    if failures:
        raise ProviderError("could not destroy every owned rental (they may still cost money): "
                            + "; ".join(failures))
    return done


def should_destroy(rental: Rental, last_task_ts: float | None, idle_timeout_s: float, *,
                   now: float | None = None) -> bool:
    """True when a rental should go: broken, stopped, or idle for ``idle_timeout_s``.

    Idle time counts from the last task (``last_task_ts``, epoch seconds) or, before
    any task ran, from the rental's start. A destroyed rental needs nothing.
    """
    if idle_timeout_s <= 0:
        raise UserError(f"idle_timeout must be a positive number of seconds "
                        f"(got {idle_timeout_s!r})")
    if rental.state == "destroyed":
        return False
    if rental.state in FINAL_STATES or rental.state == "stopped":
        return True
    now = time.time() if now is None else now
    since = last_task_ts if last_task_ts is not None else rental.started_at
    return since is not None and now - since >= idle_timeout_s
