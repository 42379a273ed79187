"""The Prometheus families of a snapshot, and a collector that makes one per scrape.

Names follow Prometheus conventions: a ``mainboard_`` prefix, base units (seconds, USD),
``_total`` on counters. Counters are derived from append-only receipts, so they only ever
grow; gauges are read at scrape time. The worker states add up (``sum by (pool)`` is the
pool's live allocations), and every declared pool has a series for each state, zeros
included, so alerts on ``== 0`` work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from mainboard.config import Config
from mainboard.metrics.gather import gather
from mainboard.metrics.snapshot import BROKER_SECTIONS, SECTIONS, Snapshot

log = logging.getLogger("mainboard.metrics")
_Family = TypeVar("_Family", GaugeMetricFamily, CounterMetricFamily)
FLEET_CACHE_S = 3.0  # worker states ask every scheduler: a scrape storm asks them once


def _per_pool(kind: type[_Family], name: str, doc: str,
              values: Mapping[str, float]) -> _Family:
    """A family with one series per pool, in pool order."""
    family = kind(name, doc, labels=["pool"])
    for pool, value in sorted(values.items()):
        family.add_metric([pool], value)
    return family


def families(snap: Snapshot) -> list[GaugeMetricFamily | CounterMetricFamily]:
    """The metric families of one snapshot, in a stable order."""
    up = GaugeMetricFamily("mainboard_broker_up", "1 when the workspace's broker answers.")
    up.add_metric([], 1.0 if snap.broker_up else 0.0)
    sections = GaugeMetricFamily(
        "mainboard_collector_up", "1 when a section of this scrape could be read (0: its "
        "source did not answer; the mainboard log says why).", labels=["section"])
    for name in SECTIONS:
        unread = name in snap.errors or (name in BROKER_SECTIONS and not snap.broker_up)
        sections.add_metric([name], 0.0 if unread else 1.0)
    queue = GaugeMetricFamily("mainboard_queue_depth", "Messages waiting in a Celery queue.",
                              labels=["queue"])
    for name, n in sorted(snap.queues.items()):
        queue.add_metric([name], n)
    workers = GaugeMetricFamily(
        "mainboard_workers", "Fleet workers (allocations) by pool and state: queued, starting, "
        "busy, idle, lost, unknown.", labels=["pool", "state"])
    for (pool, state), n in sorted(snap.workers.items()):
        workers.add_metric([pool, state], n)
    paused = _per_pool(GaugeMetricFamily, "mainboard_pool_paused", "1 while a pool is paused "
                       "after failed submissions (fleet resume-pool NAME).",
                       {pool: 1.0 if flag else 0.0 for pool, flag in snap.paused.items()})
    submitted = _per_pool(CounterMetricFamily, "mainboard_allocations_submitted",
                          "Allocations submitted for a pool.", snap.submitted)
    failed = _per_pool(CounterMetricFamily, "mainboard_allocations_failed",
                       "Allocation submissions that failed.", snap.failed)
    rate = _per_pool(GaugeMetricFamily, "mainboard_spend_usd_per_hour", "What a provider "
                     "pool's live rentals cost per hour, in USD.", snap.usd_hr)
    spent = _per_pool(CounterMetricFamily, "mainboard_spend_usd", "What a provider pool's "
                      "rentals have cost so far, in USD.", snap.spent_usd)
    batches = GaugeMetricFamily("mainboard_run_batches_per_second", "Batches a live run "
                                "finishes per second (last minute).", labels=["run"])
    samples = CounterMetricFamily("mainboard_run_samples", "Samples a live run has "
                                  "integrated (completed iterations).", labels=["run"])
    iteration = GaugeMetricFamily("mainboard_run_iteration", "The iteration a live run is in.",
                                  labels=["run"])
    for run_id, r in sorted(snap.runs.items()):
        batches.add_metric([run_id], r.batches_per_s)
        samples.add_metric([run_id], r.samples)
        iteration.add_metric([run_id], r.iteration)
    return [up, sections, queue, workers, paused, submitted, failed, rate, spent, batches,
            samples, iteration]


class WorkspaceCollector(Collector):
    """A workspace's metrics, gathered on every scrape (worker states cached FLEET_CACHE_S)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._fleet: tuple[float, Snapshot] | None = None

    def snapshot(self) -> Snapshot:
        """A fresh snapshot; the fleet part reused when younger than FLEET_CACHE_S."""
        with self._lock:
            cached = self._fleet
            fresh = cached is None or time.monotonic() - cached[0] >= FLEET_CACHE_S
            snap = gather(self.config, fleet=fresh)
            if fresh:
                self._fleet = (time.monotonic(), snap)
            elif cached is not None:
                snap.workers = cached[1].workers
                if "fleet" in cached[1].errors:
                    snap.errors["fleet"] = cached[1].errors["fleet"]
            return snap

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        snap = self.snapshot()
        for section, why in snap.errors.items():  # redacted: no URL password reaches a log
            log.warning("metrics: %s not read: %s", section, why)
        yield from families(snap)

    def describe(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        return iter(())  # registering must not gather (it would ask Redis and schedulers)


class StaticCollector(Collector):
    """One snapshot already taken (``mainboard metrics`` prints it once)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from families(self.snap)


__all__ = ["FLEET_CACHE_S", "StaticCollector", "WorkspaceCollector", "families"]
