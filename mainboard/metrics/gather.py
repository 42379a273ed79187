"""One look at the workspace for a scrape: queues, fleet workers, allocations, spend, runs.

Each section reads its own source (Redis for queues and runs, the fleet's schedulers and
worker registry for workers, receipts for allocations and spend) and a section that
cannot be read leaves the others intact: its failure is one line in ``errors`` (the
exposition turns it into ``mainboard_collector_up{section=...} 0``), never a traceback.
Nothing here writes anything or starts anything (no keeper revival, no broker start).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from mainboard import keys
from mainboard.config import Config
from mainboard.errors import MainboardError, first_line
from mainboard.fleet.records import FleetState, pool_paused, read_fleet
from mainboard.fleet.spend import pool_of, spend
from mainboard.fleet.status import fleet_status
from mainboard.fleet.workers import broker_route
from mainboard.metrics.snapshot import WORKER_STATES, RunRate, Snapshot
from mainboard.redact import redact_text
from mainboard.redisclient import redis_client
from mainboard.runs.spans import FINAL_STAGES
from mainboard.tasks import BATCH_QUEUE, COORDINATOR_QUEUE

DEFAULT_QUEUE = "celery"  # Celery's own default: tasks sent without a route
RATE_WINDOW_S = 60.0   # batches/s is measured over the last minute of a run's spans
MIN_WINDOW_S = 1.0
MAX_RUNS = 1000        # live runs looked at per scrape (newest first)
MAX_SPANS_READ = 20_000  # spans read per run and scrape (a fast run: a shorter window)
TIMEOUT_S = 3.0


def client_of(config: Config) -> redis.Redis | None:
    """A short-timeout client of the workspace's broker; None when the embedded broker is
    not running (a scrape never starts one)."""
    route = broker_route(config, start=False)
    if route is None:
        return None
    return redis_client(route.url, socket_timeout=TIMEOUT_S,
                        socket_connect_timeout=TIMEOUT_S, retry=Retry(NoBackoff(), 0))


def known_queues(config: Config, state: FleetState) -> list[str]:
    """The queues worth watching: mainboard's own, every declared pool's and every live
    fleet worker's (including the per-host queues)."""
    names = [BATCH_QUEUE, COORDINATOR_QUEUE, DEFAULT_QUEUE]
    for pool in config.fleet.pools.values():
        names += pool.queues
    for worker in state.live():
        names += worker.queues
    return sorted(set(names))


def queue_depths(client: redis.Redis, queues: Iterable[str]) -> dict[str, int]:
    """Messages waiting in each queue (kombu keeps a queue as a list under its name)."""
    names = list(queues)
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.llen(keys.celery_queue(name))
        return {n: int(v) for n, v in zip(names, pipe.execute(), strict=True)}


def worker_counts(config: Config, state: FleetState) -> dict[tuple[str, str], int]:
    """Live fleet workers by pool and state, as ``fleet status`` sees them (declared pools
    and pools with live workers get a 0 for every state, so a missing series means
    "no such pool", not "none of them")."""
    counts: Counter[tuple[str, str]] = Counter()
    pools = set(config.fleet.pools) | {pool_of(w) for w in state.live()}
    for pool in pools:
        for st in WORKER_STATES:
            counts[(pool, st)] = 0
    if not state.live():
        return dict(counts)
    for row in fleet_status(config, timeout=0.5, revive=False):
        worker = state.started.get(row.worker_id)
        pool = pool_of(worker) if worker else row.host
        st = row.state
        if st in ("completed", "stopped"):
            continue  # retired: gone, its stop receipt not written yet
        if st == "online":
            st = "busy" if row.active else "idle"
        counts[(pool, st if st in WORKER_STATES else "unknown")] += 1
    return dict(counts)


def allocations(config: Config, state: FleetState
                ) -> tuple[dict[str, int], dict[str, int], dict[str, bool]]:
    """Allocations submitted (every ``worker.started``) and failed (every
    ``fleet.scale submit_failed``) per pool, from the fleet's receipts; pools paused."""
    submitted = Counter(pool_of(w) for w in state.started.values())
    failed = Counter(s.pool for s in state.scale if s.action == "submit_failed")
    pools = set(config.fleet.pools) | set(submitted) | set(failed)
    return ({p: submitted[p] for p in sorted(pools)}, {p: failed[p] for p in sorted(pools)},
            {p: pool_paused(state, p) for p in sorted(config.fleet.pools)})


def _ms(entry_id: bytes) -> int:
    """The Redis clock (ms) a stream entry was added at: its id's first part."""
    return int(entry_id.decode().partition("-")[0])


def run_rates(client: redis.Redis) -> dict[str, RunRate]:
    """Each run whose coordinator holds its lease: finished batches per second over the
    last RATE_WINDOW_S of its spans (entry ids are the Redis clock), samples, iteration."""
    ids = [i.decode() for i in client.zrevrange(keys.runs_index(), 0, MAX_RUNS - 1)]
    if not ids:
        return {}
    with client.pipeline(transaction=False) as pipe:
        for run_id in ids:
            pipe.exists(keys.run_lease(run_id))
        live = [r for r, held in zip(ids, pipe.execute(), strict=True) if held]
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    since = now_ms - int(RATE_WINDOW_S * 1000)
    out: dict[str, RunRate] = {}
    for run_id in live:
        spans = keys.run_spans(run_id)
        with client.pipeline(transaction=False) as pipe:
            pipe.xrevrange(spans, max="+", min=f"{since}-0", count=MAX_SPANS_READ)
            pipe.xrange(spans, min="-", max="+", count=1)
            pipe.hgetall(keys.run_state(run_id))
            recent, first, state = pipe.execute()
        done = sum(1 for _id, f in recent if f.get(b"s", b"").decode() in FINAL_STAGES)
        if len(recent) == MAX_SPANS_READ:  # a fast run: the window is what was read
            first = recent[-1:]
        began = _ms(first[0][0]) if first else now_ms
        window = max(MIN_WINDOW_S, min(RATE_WINDOW_S, (now_ms - began) / 1000))
        out[run_id] = RunRate(done / window, int(float(state.get(b"samples", 0) or 0)),
                              int(state.get(b"iteration", 0) or 0))
    return out


def gather(config: Config, *, fleet: bool = True) -> Snapshot:
    """One snapshot; ``fleet=False`` leaves out the worker states (they ask schedulers)."""
    snap = Snapshot()
    try:
        state = read_fleet(config.state_dir)
    except MainboardError as exc:  # an unreadable fleet.ndjson: the broker's sections still
        state = FleetState()
        snap.errors["fleet"] = snap.errors["allocations"] = redact_text(first_line(exc))
        fleet = False

    def section(name: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except (MainboardError, redis.RedisError, OSError, ValueError) as exc:
            snap.errors[name] = redact_text(first_line(exc))

    client = None
    try:
        client = client_of(config)
        if client is not None:
            client.ping()
            snap.broker_up = True
    except (MainboardError, redis.RedisError, OSError) as exc:
        snap.errors["broker"] = redact_text(first_line(exc))
    if client is not None and snap.broker_up:
        c = client
        section("queues", lambda: snap.queues.update(queue_depths(c, known_queues(config, state))))
        section("runs", lambda: snap.runs.update(run_rates(c)))

    def counts() -> None:
        snap.submitted, snap.failed, snap.paused = allocations(config, state)
        snap.usd_hr, snap.spent_usd = spend(config, state)

    if "allocations" not in snap.errors:
        section("allocations", counts)
    if fleet:
        section("fleet", lambda: snap.workers.update(worker_counts(config, state)))
    if client is not None:
        client.close()
    return snap


__all__ = ["RATE_WINDOW_S", "gather", "pool_of", "run_rates"]
