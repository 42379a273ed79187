"""Pools: what ``fleet up`` starts, and how many of each.

A fleet is a set of pools (``[fleet.pools.NAME]``: a host, the queues its workers
consume, processes per worker, resources per allocation, and a count). ``fleet up``
brings every pool (or those named with ``--pool``) to its count; ``--on HOST`` is a
one-off pool of that host, named after it, whose count is how often ``--on HOST`` is
given (``--on hpc --on hpc`` means 2) or ``--jobs N``. The count is a target, not an
increment: a repeated ``fleet up`` starts only what is missing, so it never piles up
allocations. Nothing here connects anywhere: the plan is checked before any traffic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mainboard.config import Config, PoolConfig
from mainboard.errors import UserError
from mainboard.fleet.launch import UpOptions
from mainboard.fleet.records import check_queue
from mainboard.receipts import WorkerStarted


@dataclass(frozen=True)
class PoolPlan:
    """One pool of this ``fleet up``: its host, the options of its workers, its target."""

    name: str
    host: str
    options: UpOptions
    target: int
    declared: bool  # a [fleet.pools.NAME], not a one-off --on HOST

    def members(self, live: Sequence[WorkerStarted]) -> list[WorkerStarted]:
        """The live workers that count towards this pool's target."""
        if self.declared:
            return [w for w in live if w.pool == self.name]
        return [w for w in live if w.pool is None and w.host == self.host]


def pool_options(pool: PoolConfig, base: UpOptions) -> UpOptions:
    """A declared pool's worker options (its own keys win over the command line's)."""
    return replace(base, concurrency=pool.workers,
                   queues=tuple(dict.fromkeys(check_queue(q) for q in pool.queues)),
                   walltime=pool.walltime or base.walltime,
                   retire_before=pool.retire_before or base.retire_before,
                   idle_timeout=float(pool.idle_timeout) if pool.max_jobs is not None
                   else base.idle_timeout,
                   cpus=pool.cpus, mem_gb=pool.mem_gb, gpus=pool.gpus, nodes=pool.nodes)


def _jobs(jobs: int | None) -> int | None:
    if jobs is not None and (isinstance(jobs, bool) or jobs < 0):
        raise UserError(f"--jobs {jobs!r}: valid: an integer >= 0 (allocations per pool)")
    return jobs


def plan_pools(config: Config, options: UpOptions, *, hosts: Sequence[str] = (),
               pools: Sequence[str] = (), jobs: int | None = None,
               default_hosts: Sequence[str] = ()) -> list[PoolPlan]:
    """The pools to bring up, refused in one line before any traffic when asked wrongly."""
    jobs = _jobs(jobs)
    if hosts and pools:
        raise UserError("--on and --pool together; valid: --on HOST (a one-off pool of that "
                        "host) or --pool NAME (a [fleet.pools.NAME] of mainboard.toml)")
    declared = config.fleet.pools
    for name in pools:
        if name not in declared:
            where = str(config.path) if config.path else "no mainboard.toml"
            have = ", ".join(declared) or "none ([fleet.pools.NAME] tables)"
            raise UserError(f"--pool {name!r} is not declared in {where}; declared pools: {have}")
    if hosts:
        counts = Counter(hosts)
        if jobs is not None and any(n > 1 for n in counts.values()):
            raise UserError("--on HOST repeated and --jobs together; valid: one of them "
                            "(--on hpc --on hpc means --on hpc --jobs 2)")
        for name in counts:
            config.host(name)  # an unknown name is refused, listing the declared ones
        return [PoolPlan(name, name, options, jobs if jobs is not None else n, False)
                for name, n in counts.items()]
    if pools or declared:
        names = list(dict.fromkeys(pools)) or list(declared)
        return [PoolPlan(n, declared[n].host, pool_options(declared[n], options),
                         jobs if jobs is not None else start_count(declared[n]), True)
                for n in names]
    return [PoolPlan(name, name, options, 1 if jobs is None else jobs, False)
            for name in default_hosts]


def start_count(pool: PoolConfig) -> int:
    """Allocations ``fleet up`` starts: ``jobs``; an autoscaled pool starts ``min_jobs``
    (the keeper adds more when work waits: no allocation, GPU or not, before its work),
    or ``jobs`` when given, within its bounds."""
    if pool.max_jobs is None:
        return pool.jobs
    if "jobs" not in pool.model_fields_set:
        return pool.min_jobs
    return max(pool.min_jobs, min(pool.jobs, pool.max_jobs))


__all__ = ["PoolPlan", "plan_pools", "pool_options", "start_count"]
