"""The keeper's half of a run's goal: once per tick, every running run with a deadline or a
budget (``[stop]``) gets the pools serving its queue sized by
:func:`~mainboard.fleet.forecast.plan`, its forecast priced (``keys.run_forecast``, field
``fleet``), and, once, a line in its log when its goal is out of reach. A run whose error
target was met has its pools' idle allocations released now, not after ``idle_timeout``.

Why the keeper: it alone knows the pools (their allocations, prices, cores and limits);
the coordinator publishes the error and the rate it measures (:mod:`mainboard.tasks.goal`),
the run's spans say which allocation drew which samples.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

import redis

from mainboard import keys
from mainboard.config import Config, PoolConfig, ProviderHost
from mainboard.fleet.demand import RECENT_RUNS, running_runs
from mainboard.fleet.forecast import Plan, Supply, plan
from mainboard.fleet.launch import BrokerRoute
from mainboard.fleet.records import FleetState, node_names
from mainboard.fleet.scaling import PoolView
from mainboard.fleet.workers import registry
from mainboard.hosts.rates import host_rate
from mainboard.redisclient import redis_client
from mainboard.runs.logs import LogLine, append_logs
from mainboard.runs.spans import FINAL_STAGES, Span


class Look(Protocol):
    """What the goal reads and rewrites of the autoscaler's look at one pool (its view):
    a protocol, so the autoscaler imports this module and not the other way round."""

    view: PoolView

RELEASE_WINDOW_S = 600.0  # a goal met this recently still releases its pools' idle workers
log = logging.getLogger("mainboard.fleet.goal")


def goal_runs(client: redis.Redis) -> dict[str, dict[str, Any]]:
    """``{run id: the coordinator's forecast}`` of the recent runs with a goal; a run
    whose coordinator is gone (no lease) counts as ended (``client`` decodes replies)."""
    ids = client.zrevrange(keys.runs_index(), 0, RECENT_RUNS - 1)
    if not ids:
        return {}
    with client.pipeline(transaction=False) as pipe:
        for run_id in ids:
            pipe.hget(keys.run_forecast(run_id), "run")
            pipe.exists(keys.run_lease(run_id))
        replies = pipe.execute()
    found = {}
    for run_id, raw, leased in zip(ids, replies[::2], replies[1::2], strict=True):
        doc = json.loads(raw) if raw else None
        if not doc or not doc.get("goal"):
            continue
        if doc.get("status") == "running" and not leased:
            doc["status"] = "ended"
        found[run_id] = doc
    return found


def measured(client: redis.Redis, run_id: str, doc: Mapping[str, Any],
             alloc_of: Mapping[str, tuple[str, str]]) -> dict[str, float]:
    """Per pool: samples/s one of its allocations draws for the run, over the forecast's
    window: the run's rate split by the samples each pool's allocations stored (spans of
    the stage that stores a batch), over the allocations seen at work."""
    window, rate = doc.get("window"), doc.get("samples_per_s")
    if not window or not rate:
        return {}
    t0, t1 = float(window[0]), float(window[1])
    total, by_pool = 0, defaultdict(int)
    seen: dict[str, set[str]] = defaultdict(set)
    for _id, fields in client.xrange(keys.run_spans(run_id), min=f"{int(t0 * 1000)}-0"):
        span = Span.from_entry(run_id, fields)
        if span.stage not in FINAL_STAGES or not t0 <= span.start <= t1:
            continue
        total += span.n
        hit = alloc_of.get(span.worker.partition("@")[0])
        if hit is not None:
            by_pool[hit[0]] += span.n
            seen[hit[0]].add(hit[1])
    return {pool: rate * n / total / len(seen[pool]) for pool, n in by_pool.items() if total}


def price(config: Config, look: Look) -> float:
    """USD per hour of one more allocation: a rental's offer (the next one, else what
    its allocations pay on average), an owned host's declared ``usd_hr`` (else 0)."""
    view = look.view
    if isinstance(config.host(view.pool.host), ProviderHost):
        return view.usd_hr or (view.rented_usd_hr / len(view.allocs) if view.allocs else 0.0)

    return host_rate(config, view.pool.host).usd_hr or 0.0


def cores(pool: PoolConfig) -> int:
    """Cores one allocation holds: its ``cpus``, else one per worker process, per node."""
    return (pool.cpus or pool.workers) * pool.nodes


def _supply(config: Config, name: str, look: Look, rates: Mapping[str, float]) -> Supply:
    view = look.view
    staying = [a for a in view.allocs if not view.retiring(a)]
    return Supply(name, view.pool, len(staying), price(config, look), cores(view.pool),
                  rates.get(name))


class Goals:
    """The goal runs' sizing of one tick, applied to the keeper's looks."""

    def __init__(self, config: Config, url: str) -> None:
        self.config, self.url = config, url

    def apply(self, state: FleetState, looks: dict[str, Look]) -> None:
        """Size ``looks`` (name -> the pool's look) for the goal runs on their queues."""
        if not looks:
            return
        with registry(BrokerRoute(self.url)) as client, \
                redis_client(self.url, socket_timeout=5, socket_connect_timeout=5) as raw:
            docs = goal_runs(client)
            if not docs:
                return
            alloc_of = {node: (w.pool, w.worker_id) for w in state.live() if w.pool
                        for node in node_names(w)}
            now = time.time()
            jobs: dict[str, int] = defaultdict(int)
            sized, release = set(), set()
            for run_id, doc in docs.items():
                serving = [n for n, lk in looks.items() if doc.get("queue") in lk.view.pool.queues]
                if not serving:
                    continue
                if doc.get("status") == "met" and now - doc.get("updated", 0) < RELEASE_WINDOW_S:
                    release.update(serving)
                if doc.get("status") != "running":
                    continue
                rates = measured(raw, run_id, doc, alloc_of)
                made = plan(doc, [_supply(self.config, n, looks[n], rates) for n in serving], now)
                self._publish(client, run_id, made, now)
                if made.jobs is not None:
                    sized.update(serving)
                    for name, n in made.jobs.items():
                        jobs[name] += n
            for name, look in looks.items():
                if name in sized:
                    other = sum(v for k, v in running_runs(client, look.view.pool.queues).items()
                                if k not in docs)
                    look.view = replace(look.view, goal_jobs=jobs[name], other_outstanding=other)
                elif name in release:
                    look.view = replace(look.view, release=True)

    def _publish(self, client: redis.Redis, run_id: str, made: Plan, now: float) -> None:
        """The keeper's part of the forecast; the unreachable goal said once, in the log."""
        key = keys.run_forecast(run_id)
        client.hset(key, "fleet", json.dumps(made.fleet))
        if made.unmet and client.hsetnx(key, "said", made.unmet):
            append_logs(client, run_id, [LogLine(now, "warn", "fleet-keeper",
                                                 socket.gethostname(), made.unmet,
                                                 source="keeper")])
            log.warning("run %s: %s", run_id, made.unmet)


__all__ = ["Goals", "cores", "goal_runs", "measured", "price"]
