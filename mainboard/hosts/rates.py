"""What a declared host costs per hour and what hardware it offers, without starting anything.

A provider host's rate is the cheapest offer its provider lists now that fits (its
``gpu``, ``max_usd_hr``, and what a job asks: GPU count, memory); an owned host (local,
ssh, SLURM, PBS) costs its declared ``usd_hr``, else 0. Hardware is the facts cache for
owned hosts (``mainboard facts --on NAME`` fills it) and the offer for providers. Batch
estimates and the router read these; no credential value ever reaches a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mainboard.bridges.providers import adapter_for
from mainboard.config import Config, ProviderHost
from mainboard.errors import MainboardError, first_line
from mainboard.hosts.facts import cached_record

if TYPE_CHECKING:
    from mainboard.bridges.providers.base import Offer
    from mainboard.hosts.facts import Facts

__all__ = ["Rate", "facts_text", "host_rate", "offer_word"]


@dataclass(frozen=True)
class Rate:
    """A host's hourly price (None: unknown, ``source`` says why) and its hardware line."""

    usd_hr: float | None
    source: str
    hardware: str
    offer: Offer | None = None
    facts: Facts | None = None


def offer_word(offer: Offer) -> str:
    """``1xSIM_RTX_4090/24.6GB``: one word, for columns (GPU memory is per GPU)."""
    return f"{offer.gpu_count}x{offer.gpu.replace(' ', '_')}/{offer.vram_gb:.1f}GB"


def facts_text(facts: Facts) -> str:
    """``8cpu/15.6GB/2xA100`` from cached facts: one word, for columns."""
    mem = f"{facts.memory_total / 1e9:.1f}GB" if facts.memory_total else "?GB"
    gpus = f"{len(facts.gpus)}x{facts.gpus[0].name.replace(' ', '_')}" if facts.gpus else "0gpu"
    return f"{facts.cpu_logical or '?'}cpu/{mem}/{gpus}"


def _fitting(offers: list[Offer], gpus: int | None, mem_gb: float | None) -> list[Offer]:
    return [o for o in offers if (gpus is None or o.gpu_count >= gpus)
            and (mem_gb is None or o.ram_gb >= mem_gb)]


def host_rate(config: Config, name: str, *, gpus: int | None = None,
              mem_gb: float | None = None) -> Rate:
    """The rate and hardware of host ``name`` for a job asking ``gpus`` and ``mem_gb``."""
    host = config.host(name)
    if not isinstance(host, ProviderHost):
        record = cached_record(config.state_dir, name)
        facts = record.facts if record is not None else None
        hardware = facts_text(facts) if facts is not None else "no-facts"
        declared = host.usd_hr
        if declared is not None:
            return Rate(float(declared), f"declared usd_hr of {name}", hardware, facts=facts)
        return Rate(0.0, f"owned {host.kind} host (no usd_hr declared)", hardware, facts=facts)

    provider = config.providers[host.provider]  # the config refuses an undeclared one
    try:
        offers = _fitting(adapter_for(host.provider, provider).offers(host.gpu, host.max_usd_hr),
                          gpus, mem_gb)
    except (MainboardError, OSError) as exc:
        return Rate(None, f"no rate: {first_line(exc)}", "unknown")
    if not offers:
        asked = ", ".join(x for x in (f"{gpus} GPUs" if gpus else "", f"{mem_gb:g} GB"
                                      if mem_gb else "") if x) or "this job"
        return Rate(None, f"no {host.provider} offer of gpu={host.gpu or 'any'} under "
                          f"max_usd_hr={host.max_usd_hr or 'any'} fits {asked}", "none on sale")
    offer = offers[0]
    return Rate(offer.usd_hr, f"{host.provider} offer {offer.id}: {offer.gpu_count}x "
                              f"{offer.gpu} (cheapest matching now)", offer_word(offer), offer)
