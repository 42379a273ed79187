"""Rented cloud GPUs: the provider adapter interface, one REST adapter, a local simulation.

``adapter_for`` turns a ``[providers.NAME]`` table into an adapter: ``kind = "vast"``
talks to the vast.ai-shaped REST API at ``api_url`` (default the public one);
``kind = "simulated"`` is the same adapter pointed at a local simulated provider
(``python -m mainboard.bridges.providers.simulated``), whose ``api_url`` is required.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mainboard.errors import ConfigError

from .base import Offer, ProviderAdapter, Rental, RentalState
from .lifecycle import RentalGuard, destroy_all_owned, owned_rentals, should_destroy
from .rest import RestProvider

KINDS = ("vast", "simulated")

__all__ = ["KINDS", "Offer", "ProviderAdapter", "Rental", "RentalGuard", "RentalState",
           "RestProvider", "adapter_for", "adapters_from_config", "destroy_all_owned",
           "owned_rentals", "should_destroy"]


def adapter_for(name: str, provider: Any, env: Mapping[str, str] | None = None
                ) -> RestProvider:
    """The adapter for one ``ProviderConfig`` (kind, api_key_env, api_url, image, region)."""
    if provider.kind not in KINDS:
        raise ConfigError("unknown provider kind", key=f"providers.{name}.kind",
                          value=provider.kind, valid=KINDS)
    if provider.kind == "simulated" and not provider.api_url:
        raise ConfigError("a simulated provider needs the URL of its local server",
                          key=f"providers.{name}.api_url",
                          valid="http://127.0.0.1:PORT (python -m "
                                "mainboard.bridges.providers.simulated --port PORT --state DIR)")
    return RestProvider(name, api_url=provider.api_url, api_key_env=provider.api_key_env,
                        image=provider.image, region=provider.region, env=env)


def adapters_from_config(config: Any, env: Mapping[str, str] | None = None
                         ) -> dict[str, ProviderAdapter]:
    """One adapter per ``[providers.NAME]`` of a loaded ``Config``."""
    return {name: adapter_for(name, provider, env) for name, provider in config.providers.items()}
