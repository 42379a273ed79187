"""Costs as receipts: what each job has cost so far, from ``job.cost`` lines in its own log.

The rate is fixed when the job is submitted: a provider job's is the price of the
rental it runs on (what the provider bills per hour), an owned host's its declared
``usd_hr``; a host with neither has an unknown rate (``usd_hr`` None, said as "rate
unknown", never counted as 0). Observations follow (``JobStore.record_cost``): one at
submit (0 s), one per monitor pass while the job runs, one at its verdict; each is
rate x the seconds it has run (the last by the job script's own start and end stamps,
``JobView.run_seconds``, so a verdict seen late does not charge the wait). ``spend`` sums the last observation of each job for
``mainboard monitor --json``; a batch sums its own jobs (``mainboard.batch.spend``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mainboard.config import ProviderHost
from mainboard.errors import MainboardError, first_line
from mainboard.hosts.rates import host_rate
from mainboard.hosts.rentals import attached_rental
from mainboard.receipts import JobCost

if TYPE_CHECKING:
    from mainboard.bridges.jobspec import JobSpec
    from mainboard.hosts.access import Host
    from mainboard.jobs.store import JobView

UNKNOWN = "rate unknown"


def submit_rate(handle: Host, spec: JobSpec) -> tuple[float | None, str]:
    """(USD per hour, where it comes from) of a job about to be submitted on ``handle``."""
    config = handle.config
    if isinstance(config, ProviderHost):  # the rental the submit attached to: its price

        rental = attached_rental(handle.board.config, handle.name)
        if rental is not None:
            return rental.usd_hr, (f"rental {rental.rental_id} of {handle.name} at its billed "
                                   f"price ({rental.provider} offer {rental.offer_id})")
    if not isinstance(config, ProviderHost) and getattr(config, "usd_hr", None) is None:
        return None, f"{UNKNOWN}: host {handle.name} declares no usd_hr"
    try:
        rate = host_rate(handle.board.config, handle.name, gpus=spec.gpus, mem_gb=spec.mem_gb)
    except (MainboardError, OSError) as exc:
        return None, f"{UNKNOWN}: {first_line(exc)}"
    if rate.usd_hr is None:
        return None, f"{UNKNOWN}: {rate.source}"
    return rate.usd_hr, rate.source


def first_cost(job_id: str, usd_hr: float | None, source: str) -> JobCost:
    """The observation written with the job's receipt: its rate, nothing spent yet."""
    return JobCost(id=job_id, usd_hr=usd_hr, source=source, seconds=0.0,
                   usd=None if usd_hr is None else 0.0, at="submit")


def cost_entry(view: JobView) -> dict[str, Any] | None:
    """One job's spend as ``monitor --json`` and ``batch watch`` show it (None: no cost
    lines, a job submitted before costs were recorded)."""
    cost = view.cost
    if cost is None:
        return None
    return {"id": view.id, "name": view.name, "host": view.host, "state": view.state.value,
            "usd_hr": cost.usd_hr, "seconds": cost.seconds, "usd": cost.usd,
            "rate": cost.source if cost.usd_hr is not None else UNKNOWN, "at": cost.at}


def spend(views: list[JobView]) -> dict[str, Any]:
    """Spend so far of ``views``: per job, the total of the known rates, and the jobs whose
    rate is unknown (not counted in the total, never as 0)."""
    jobs = [entry for view in views if (entry := cost_entry(view)) is not None]
    known = [j for j in jobs if j["usd"] is not None]
    return {"usd": round(sum(j["usd"] for j in known), 6),
            "seconds": round(sum(j["seconds"] for j in known), 3),
            "unknown": [j["id"] for j in jobs if j["usd"] is None], "jobs": jobs}


def usd_text(usd: float | None) -> str:
    """``$0.0123`` or ``rate unknown``: a spend for humans."""
    return UNKNOWN if usd is None else f"${usd:.4f}"
