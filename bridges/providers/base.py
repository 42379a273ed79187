"""The provider adapter interface: offers, rent, status, destroy, balance for rented GPUs.

A provider adapter talks to one GPU rental marketplace. Everything above it (the
rental guard, the fleet) sees only ``Offer`` and ``Rental`` and the methods below, so
a second marketplace is one more subclass. Client-side checks that protect money
(price ceiling, offer filtering) live here, once, and never trust the API to apply
them.
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

from mainboard.errors import OfferNotFound, PriceLimitExceeded, ProviderError, UserError

RentalState = Literal["pending", "running", "stopped", "failed", "destroyed", "unknown"]
FINAL_STATES: frozenset[str] = frozenset({"failed", "destroyed"})

_PUBLIC_KEY = re.compile(
    r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com"
    r"|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]+={0,3}( [\x20-\x7e]*)?\Z")


@dataclass(frozen=True)
class Offer:
    """One rentable machine as the marketplace lists it; ``vram_gb`` is per GPU."""

    id: str
    gpu: str
    gpu_count: int
    vram_gb: float
    usd_hr: float
    cpus: float
    ram_gb: float
    region: str | None = None


@dataclass(frozen=True)
class Rental:
    """A rented machine; ``ssh_*`` are None until the provider has assigned them."""

    id: str
    state: RentalState
    ssh_host: str | None
    ssh_port: int | None
    ssh_user: str
    usd_hr: float
    label: str | None = None
    started_at: float | None = None
    message: str | None = None


def gpu_key(name: str) -> str:
    """Compare GPU names the way users write them: case, ``_``, ``-`` and spaces ignored."""
    return " ".join(re.sub(r"[_\-]", " ", name).lower().split())


def check_public_key(key: str) -> str:
    """One OpenSSH public key line; anything else (newlines, options) could inject keys."""
    text = key.strip()
    if not _PUBLIC_KEY.match(text):
        shown = text if len(text) < 60 else text[:57] + "..."
        raise UserError(f"ssh_public_key {shown!r} is not one OpenSSH public key line; valid: "
                        "'ssh-ed25519 AAAA... comment' (the contents of a .pub file)")
    return text


def check_price(offer: Offer, max_usd_hr: float | None, provider: str) -> None:
    """Refuse an offer above the ceiling before any money is spent."""
    if max_usd_hr is not None and offer.usd_hr > max_usd_hr:
        raise PriceLimitExceeded(
            f"provider {provider}: offer {offer.id} ({offer.gpu_count}x {offer.gpu}) costs "
            f"{offer.usd_hr:.4f} USD/hr, above max_usd_hr = {max_usd_hr:g}; "
            "raise max_usd_hr or pick a cheaper offer")


class ProviderAdapter(ABC):
    """One GPU marketplace. Subclasses implement the ``_search`` and rental primitives."""

    def __init__(self, name: str) -> None:
        self.name = name

    # -- primitives each marketplace implements ---------------------------------------------

    @abstractmethod
    def _search(self, gpu: str | None, max_usd_hr: float | None) -> list[Offer]:
        """Ask the marketplace for offers (it may filter; ``offers`` filters again)."""

    @abstractmethod
    def rent(self, offer_id: str, *, ssh_public_key: str, label: str,
             image: str | None = None) -> Rental:
        """Rent ``offer_id`` with our key authorised; raises OfferNotFound for unknown ids."""

    @abstractmethod
    def status(self, rental_id: str) -> Rental:
        """Current state; a rental the provider no longer knows is ``state="destroyed"``."""

    @abstractmethod
    def destroy(self, rental_id: str) -> None:
        """Stop paying for ``rental_id``; destroying a rental that is already gone is fine."""

    @abstractmethod
    def balance(self) -> float:
        """Remaining account credit in USD."""

    @abstractmethod
    def list_rentals(self, label_prefix: str | None = None) -> list[Rental]:
        """Every live rental of this account, optionally only labels starting with a prefix."""

    # -- shared behaviour --------------------------------------------------------------------

    def offers(self, gpu: str | None = None, max_usd_hr: float | None = None) -> list[Offer]:
        """Offers matching ``gpu`` (any spelling) at or under ``max_usd_hr``, cheapest first."""
        if max_usd_hr is not None and max_usd_hr <= 0:
            raise UserError(f"max_usd_hr must be greater than 0 (got {max_usd_hr!r})")
        found = [o for o in self._search(gpu, max_usd_hr)
                 if (gpu is None or gpu_key(o.gpu) == gpu_key(gpu))
                 and (max_usd_hr is None or o.usd_hr <= max_usd_hr)]
        return sorted(found, key=lambda o: (o.usd_hr, o.id))

    def offer(self, offer_id: str) -> Offer:
        """The listed offer with this id, or OfferNotFound saying what is listed."""
        listed = self._search(None, None)
        for candidate in listed:
            if candidate.id == str(offer_id):
                return candidate
        raise OfferNotFound(f"provider {self.name}: offer {offer_id!r} is not listed (unknown or "
                            f"already rented); {len(listed)} offers are listed now, see offers()")

    def cheapest(self, gpu: str | None = None, max_usd_hr: float | None = None) -> Offer:
        """The cheapest matching offer, or a ProviderError naming what is on sale."""
        matching = self.offers(gpu, max_usd_hr)
        if matching:
            return matching[0]
        listed = self.offers(gpu) if gpu else self.offers()
        hint = (f"cheapest {gpu or 'offer'} is {listed[0].usd_hr:.4f} USD/hr" if listed
                else f"GPUs on sale: {', '.join(sorted({o.gpu for o in self.offers()})) or 'none'}")
        raise ProviderError(f"provider {self.name}: no offer for gpu={gpu or 'any'} at or under "
                            f"max_usd_hr={max_usd_hr if max_usd_hr is not None else 'any'}; {hint}")

    def wait_ready(self, rental_id: str, timeout: float = 300.0, poll: float = 0.5) -> Rental:
        """Poll until the rental runs with an ssh address; a failed rental raises at once."""
        deadline = time.monotonic() + timeout
        while True:
            rental = self.status(rental_id)
            if rental.state == "running" and rental.ssh_host and rental.ssh_port:
                return rental
            if rental.state in FINAL_STATES:
                raise ProviderError(f"provider {self.name}: rental {rental_id} is {rental.state}"
                                    + (f": {rental.message}" if rental.message else ""))
            if time.monotonic() >= deadline:
                raise ProviderError(f"provider {self.name}: rental {rental_id} still "
                                    f"{rental.state} after {timeout:g}s")
            time.sleep(poll)
