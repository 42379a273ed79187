"""Sizing pools for a run's goal, pure: the run's forecast and the pools serving it in,
allocations per pool, the rates and prices of the forecast, and what would meet an
unreachable goal out.

No clock, no Redis (the keeper's :mod:`~mainboard.fleet.goal` gathers the numbers), so
each rule is tested with made-up ones:

- a run draws ``rate`` samples/s per allocation of a pool (measured from its spans; a pool
  not seen at work yet counts at the mean of those seen); ``samples_to_target`` of them
  in the ``deadline - now`` seconds left need ``samples_to_target / left`` samples/s;
- pools are filled cheapest first (USD per sample, then core-hours per sample), each up
  to its ``max_jobs`` and to what its ``max_usd_hr`` pays for;
- with N allocations the run costs N times as much per hour for 1/N of the time, so its
  cost to target does not depend on N, only on the pools' prices per sample: a budget
  too small is said with the dollars (or core-hours) missing, a deadline out of reach
  with the allocations, or the time, missing; for the same reason a running goal run
  never gives allocations back before its target is met (then all of them go at once);
- until ``MIN_ITERATIONS`` iterations are measured (VEGAS is still adapting, the first
  errors overstate what is left) a goal run wants one allocation, of the cheapest pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mainboard.config import PoolConfig

MIN_ITERATIONS = 3


@dataclass(frozen=True)
class Supply:
    """One pool serving the run: its allocations now, and one allocation's price, cores and
    measured samples/s for this run (None: none of its allocations seen at work yet)."""

    name: str
    pool: PoolConfig
    current: int = 0
    usd_hr: float = 0.0
    cores: int = 1
    rate: float | None = None

    @property
    def cap(self) -> int:
        """At most this many allocations: ``max_jobs`` (a fixed pool: what it has), and
        no more than its ``max_usd_hr`` pays for."""
        cap = self.pool.max_jobs if self.pool.autoscaled else self.current
        if self.usd_hr > 0 and self.pool.max_usd_hr is not None:
            cap = min(cap or 0, math.floor(self.pool.max_usd_hr / self.usd_hr + 1e-9))
        return int(cap or 0)


@dataclass(frozen=True)
class Plan:
    """Allocations the run wants per pool (None: the goal does not size them, the queue
    does), the keeper's part of its forecast, and the line saying it cannot be met."""

    jobs: dict[str, int] | None
    fleet: dict[str, Any] = field(default_factory=dict)
    unmet: str | None = None


def _rates(doc: dict[str, Any], supplies: list[Supply]) -> dict[str, float]:
    seen = [s.rate for s in supplies if s.rate]
    if seen:
        default = sum(seen) / len(seen)
    else:
        working = sum(s.current for s in supplies)
        default = (doc.get("samples_per_s") or 0.0) / max(1, working)
    return {s.name: s.rate or default for s in supplies}


def _mix(jobs: dict[str, int], supplies: list[Supply], rates: dict[str, float]
         ) -> tuple[float, float | None, float | None]:
    """samples/s, USD and core-hours per sample of allocations ``jobs``."""
    rate = sum(jobs.get(s.name, 0) * rates[s.name] for s in supplies)
    if rate <= 0:
        return 0.0, None, None
    usd = sum(jobs.get(s.name, 0) * s.usd_hr for s in supplies) / 3600 / rate
    core = sum(jobs.get(s.name, 0) * s.cores for s in supplies) / 3600 / rate
    return rate, usd, core


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def plan(doc: dict[str, Any], supplies: list[Supply], now: float) -> Plan:
    """What the run's goal asks of ``supplies`` (the pools serving its queue) at ``now``."""
    if not supplies:
        return Plan(None)
    rates = _rates(doc, supplies)
    order = sorted(supplies, key=lambda s: (s.usd_hr / rates[s.name] if rates[s.name] else 0,
                                            s.cores / rates[s.name] if rates[s.name] else 0,
                                            s.name))
    current = {s.name: s.current for s in supplies}
    todo = int(doc.get("samples_to_target") or 0)
    deadline = doc.get("deadline")
    measured = (doc.get("iteration") or 0) >= MIN_ITERATIONS and any(rates.values())
    if deadline is None:  # a budget alone: any number of allocations costs the same
        jobs = None
    elif not measured:
        jobs = {s.name: 0 for s in supplies}
        jobs[order[0].name] = 1
    elif todo == 0 or deadline <= now:
        jobs = dict(current) if sum(current.values()) else {order[0].name: 1}
    else:
        jobs, remaining = {}, todo / (deadline - now)
        for s in order:
            n = min(s.cap, math.ceil(remaining / rates[s.name])) if remaining > 0 else 0
            jobs[s.name] = max(0, n)
            remaining -= jobs[s.name] * rates[s.name]
        # never fewer than it has while the run goes on: they cost no more (see above),
        # and a rate measured while one was booting would otherwise shrink and grow it
        jobs = {name: max(n, current[name]) for name, n in jobs.items()}
    rate, usd, core = _mix(current, supplies, rates)
    if rate <= 0:  # nothing at work yet: priced at the mix it is about to get
        rate, usd, core = _mix(jobs or {order[0].name: 1}, supplies, rates)
        rate = 0.0
    fleet = {"iteration": doc.get("iteration"), "samples_per_s": rate or None,
             "usd_per_sample": usd, "core_hours_per_sample": core,
             "pools": {s.name: {"allocations": s.current, "planned": (jobs or {}).get(s.name),
                                "samples_per_s_per_allocation": rates[s.name],
                                "usd_hr": s.usd_hr, "cores": s.cores} for s in supplies}}
    unmet = _unmet(doc, order, rates, jobs, now) if measured else None
    return Plan(jobs, fleet, unmet)


def _unmet(doc: dict[str, Any], order: list[Supply], rates: dict[str, float],
           jobs: dict[str, int] | None, now: float) -> str | None:
    """The one line of an unreachable goal: what is missing, and what would meet it."""
    todo, deadline = int(doc.get("samples_to_target") or 0), doc.get("deadline")
    if todo <= 0:
        return None
    wants: list[str] = []
    limits: list[str] = []
    best = {s.name: s.cap for s in order}
    full = sum(best[s.name] * rates[s.name] for s in order)
    if deadline is not None:
        left = deadline - now
        need = todo / left if left > 0 else math.inf
        if need > full:
            at = datetime.fromtimestamp(deadline).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
            limits.append(f"by the deadline {at}")
            cheapest = order[0]
            if left > 0:
                more = math.ceil((need - full) / rates[cheapest.name])
                wants.append(f"{more} more allocation(s) of pool {cheapest.name} (its "
                             f"max_jobs {cheapest.pool.max_jobs} and price limits allow "
                             f"{cheapest.cap})")
            if full > 0:
                wants.append(f"{_duration(todo / full - max(0.0, left))} more time at "
                             f"{sum(best.values())} allocation(s)")
    mix = jobs if jobs and sum(jobs.values()) else best
    _rate, usd, core = _mix(mix, order, rates)
    drawn = int(doc.get("samples") or 0)
    for budget, per, unit, key in ((doc.get("budget_usd"), usd, "$", "budget_usd"),
                                   (doc.get("budget_core_hours"), core, "", "budget_core_hours")):
        if budget is None or per is None:
            continue
        total = (drawn + todo) * per
        if total > budget + 1e-12:
            limits.append(f"within {key} {budget:g}")
            wants.append(f"{unit}{total - budget:.2f} more" if unit
                         else f"{total - budget:.2f} more core-hours")
    if not limits:
        return None
    return (f"the error target cannot be met {' and '.join(limits)}: {todo:,} samples to go "
            f"(error {doc.get('error_ratio', 0):.2f}x its target); it would take "
            + ", or ".join(wants))


__all__ = ["MIN_ITERATIONS", "Plan", "Supply", "plan"]
