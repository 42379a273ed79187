"""A run's forecast as viewers read it (``runs show``, the dashboard): the coordinator's
part (error, samples to target, samples/s, deadline, budgets; :mod:`mainboard.tasks.goal`)
priced with the fleet keeper's (rates, USD and core-hours per sample of the allocations
serving the run; :mod:`mainboard.fleet.goal`), from the run's ``forecast`` hash.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from mainboard import keys


def read_forecast(r: redis.Redis, run_id: str) -> dict[str, Any] | None:
    """The run's forecast: the coordinator's part, priced with the keeper's rates of its
    last look (samples/s of the allocations serving the run now, USD and core-hours per
    sample); None: nothing published."""
    parts = {(k.decode() if isinstance(k, bytes) else k): v
             for k, v in r.hgetall(keys.run_forecast(run_id)).items()}
    if "run" not in parts:
        return None
    doc = json.loads(parts["run"])
    fleet = json.loads(parts["fleet"]) if "fleet" in parts else None
    if fleet and doc.get("status") == "running":
        doc.update(priced(doc, fleet))
    if "said" in parts:
        said = parts["said"]
        doc["unmet"] = said.decode() if isinstance(said, bytes) else said
    return doc


def priced(doc: dict[str, Any], fleet: dict[str, Any]) -> dict[str, Any]:
    """Time, USD and core-hours to the target and per halving of the error, from the
    newest samples to target and the keeper's rates (the allocations serving it now)."""
    todo, halve = doc.get("samples_to_target") or 0, doc.get("halving_samples") or 0
    rate, usd, core = (fleet.get(k) for k in ("samples_per_s", "usd_per_sample",
                                              "core_hours_per_sample"))
    out: dict[str, Any] = {"fleet": fleet}
    if rate:
        out["time_to_target_s"] = todo / rate
    if usd is not None:
        out.update(usd_to_target=todo * usd, usd_per_halving=halve * usd)
    if core is not None:
        out.update(core_hours_to_target=todo * core, core_hours_per_halving=halve * core)
    return out


def forecast_lines(doc: dict[str, Any]) -> list[str]:
    """A few lines for people: time, samples and money to the target, the cost of halving
    the error, the deadline, and the line saying the goal is out of reach."""
    status = doc.get("status", "running")
    if status != "running":
        return [f"forecast   target {'met' if status == 'met' else 'not met (run ended)'}"]
    if doc.get("samples_to_target") is None:
        return ["forecast   measuring: from the first iteration's error on"]
    tt = doc.get("time_to_target_s")
    first = (f"forecast   {doc.get('samples_to_target', 0):,} samples to target"
             + (f", {_span(tt)} at the current allocations" if tt is not None else "")
             + (f", ${doc['usd_to_target']:.2f}" if doc.get("usd_to_target") is not None
                else "")
             + (f", {doc['core_hours_to_target']:.3g} core-h"
                if doc.get("core_hours_to_target") is not None else ""))
    lines = [first]
    if doc.get("usd_per_halving") is not None:
        lines.append(f"           halving the error: ${doc['usd_per_halving']:.2f}, "
                     f"{doc.get('core_hours_per_halving') or 0:.3g} core-h "
                     f"({doc.get('halving_samples', 0):,} samples)")
    if doc.get("deadline"):
        left = doc["deadline"] - time.time()
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc["deadline"]))
        lines.append(f"           deadline {at} ({_span(left)} left)" if left > 0
                     else f"           deadline {at} (passed)")
    if doc.get("unmet"):
        lines.append(f"           {doc['unmet']}")
    return lines


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


__all__ = ["forecast_lines", "priced", "read_forecast"]
