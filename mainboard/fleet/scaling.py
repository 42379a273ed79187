"""The autoscaler's policy, pure: from one look at a pool, what to do and why.

No clock, no Redis, no scheduler in here (the keeper's ``autoscale`` module gathers a
``PoolView`` and carries out the ``Decision``s), so every rule is tested with made-up
views. The rules, in order:

- a worker that beats but has started no task for ``stall_after`` while its pool's queues
  hold work is stalled (Celery's consumer lost in a broker reconnect): restarted, and its
  replacement submitted at once (it no longer counts);
- a paused pool does nothing until ``fleet resume-pool``; ``PAUSE_AFTER`` consecutive
  failed submissions pause it (one line saying why) instead of flooding the scheduler;
- the target is the work (tasks waiting in the pool's queues plus tasks in hand, or the
  runs' outstanding batches if more) over the processes of one allocation, rounded up,
  within ``min_jobs`` and ``max_jobs``;
- a fixed pool (no ``max_jobs``) keeps ``jobs`` allocations: a worker lost (its job
  ended, its heartbeat stopped) is replaced;
- an allocation that retires (walltime) within the pool's lead time no longer counts:
  its replacement is submitted early enough to be running before it drains;
- below target: submit, at most ``backlog`` allocations pending at once, never past
  ``max_usd_hr`` (the prices of the offers rented now + the price of the offer the next
  rental would take) nor ``budget_usd`` (spent + this allocation's walltime at that
  price); a priced pool rents one at a time, so each rental is judged on the listing of
  the moment (the next cheapest offer may cost more once the cheapest is taken);
- a pool whose walltime may be chosen (``max_walltime``) asks, for each submission, for the
  largest time need waiting in its queues plus its ``retire_before``, rounded up to a
  minute, between ``walltime`` and ``max_walltime``;
- above target: cancel allocations still pending (they hold nothing), then retire workers
  idle past ``idle_timeout`` (warm shutdown), or idle at all once a run's error target was
  met (``release``). A worker with a task in hand is never retired, whatever the target;
- a run with a deadline (``goal_jobs``, :mod:`~mainboard.fleet.goal`) sizes the pool for its
  forecast instead of its queued batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from mainboard.config import PoolConfig
from mainboard.fleet.launch import DEFAULT_RETIRE_BEFORE_S

PAUSE_AFTER = 3
DEFAULT_LEAD_S = 60.0  # until the pool's own allocations have shown their queue wait
LEAD_MARGIN = 1.5


def lead_time(waits: list[float]) -> float:
    """How early to submit a replacement: the slowest recent queue wait (submission to
    running) of the pool's own allocations, with margin."""
    recent = waits[-5:]
    return max(recent) * LEAD_MARGIN + 5.0 if recent else DEFAULT_LEAD_S


@dataclass(frozen=True)
class Alloc:
    """One allocation of the pool as last seen."""

    worker_id: str
    state: str                # "pending" (in the scheduler's queue) or "running"
    active: int = 0           # tasks in hand
    idle_s: float | None = None  # seconds since its last task (or its start); None: unknown
    left_s: float | None = None  # seconds until it retires before its walltime; None: no end


@dataclass(frozen=True)
class PoolView:
    """Everything the policy needs about one pool, gathered by the keeper."""

    name: str
    pool: PoolConfig
    allocs: list[Alloc] = field(default_factory=list)
    queue_depth: int = 0      # messages waiting in the pool's queues
    outstanding: int = 0      # batches the runs' coordinators still wait for
    failures: int = 0         # consecutive failed submissions
    paused: bool = False
    usd_hr: float | None = None  # the price of the offer the next rental would take
    rented_usd_hr: float = 0.0  # the prices of the offers the pool's allocations rented
    spent_usd: float = 0.0
    jobs: int | None = None   # what `fleet up` asked (--jobs), for a fixed pool
    lead_s: float = DEFAULT_LEAD_S  # submission to running, learned from this pool
    need_s: float | None = None  # the largest time_request waiting in the pool's queues
    stall_after: float | None = None  # no task started for this long, with work: stalled
    goal_jobs: int | None = None  # what runs with a deadline want of it (fleet/goal): sizes it
    other_outstanding: int = 0  # with goal_jobs: batches the other runs wait for
    release: bool = False  # a run's goal was just met: idle workers go now, not at idle_timeout

    def retiring(self, alloc: Alloc) -> bool:
        """Its replacement must be submitted now to be running before it drains."""
        return alloc.left_s is not None and alloc.left_s <= self.lead_s

    def count(self, state: str) -> int:
        return sum(a.state == state for a in self.allocs)

    def stalled(self, alloc: Alloc) -> bool:
        """Beating (a stale one is not in ``allocs``), running, nothing in hand and nothing
        started for ``stall_after`` while tasks wait in its queues; never one retiring (a
        worker near its end puts back tasks its time cannot hold, on purpose)."""
        return (self.stall_after is not None and self.queue_depth > 0
                and alloc.state == "running" and alloc.active == 0
                and alloc.idle_s is not None and alloc.idle_s >= self.stall_after
                and not self.retiring(alloc))


@dataclass(frozen=True)
class Decision:
    """One action for the keeper, with the reason its receipt line carries."""

    action: str               # restart, submit, cancel, retire, pause, hold
    reason: str
    count: int = 0
    worker_ids: tuple[str, ...] = ()
    target: int = 0
    walltime: int | None = None  # seconds each submitted allocation asks for (None: default)


def walltime_for(pool: PoolConfig, need_s: float | None) -> int | None:
    """The walltime a new allocation asks for: the pool's own, or, where it may be chosen
    (``max_walltime``), enough for ``need_s`` once ``retire_before`` is taken off, in whole
    minutes, within ``walltime`` and ``max_walltime`` (a need past the maximum gets the
    maximum: the task then fails in one line after its wait, see tasks/timeneed)."""
    if pool.max_walltime is None or not need_s:
        return pool.walltime
    retire = pool.retire_before or DEFAULT_RETIRE_BEFORE_S
    want = 60 * math.ceil((need_s + retire) / 60)
    return min(max(pool.walltime or 0, want), pool.max_walltime)


def target(view: PoolView) -> int:
    """How many allocations the work calls for, within the pool's bounds (a pool without
    ``max_jobs`` is not autoscaled: its target is ``jobs``, kept up as workers die)."""
    pool = view.pool
    if not pool.autoscaled:
        return pool.jobs if view.jobs is None else view.jobs
    per = max(1, pool.workers * pool.nodes)
    work = max(view.queue_depth + sum(a.active for a in view.allocs), view.outstanding)
    want = math.ceil(work / per)
    if view.goal_jobs is not None:  # the goal runs' own batches are sized by their deadline
        want = max(view.goal_jobs, math.ceil(view.other_outstanding / per))
    upper = pool.max_jobs if pool.max_jobs is not None else want
    return max(pool.min_jobs, min(want, upper))


def _affordable(view: PoolView, wanted: int, walltime: int | None) -> tuple[int, str]:
    """How many of ``wanted`` new allocations the price limits allow (a priced pool: one
    at most, at the price of the offer it would rent), and why not more."""
    price, pool = view.usd_hr, view.pool
    if not price or not wanted:
        return wanted, ""
    if pool.max_usd_hr is not None and view.rented_usd_hr + price > pool.max_usd_hr + 1e-9:
        return 0, (f"max_usd_hr {pool.max_usd_hr:g}: {len(view.allocs)} allocation(s) "
                   f"rented at ${view.rented_usd_hr:.2f}/h, the next offer costs "
                   f"${price:.2f}/h")
    hours = (walltime or 3600) / 3600
    if pool.budget_usd is not None and view.spent_usd + price * hours > pool.budget_usd + 1e-9:
        return 0, (f"budget_usd {pool.budget_usd:g}: ${view.spent_usd:.2f} spent, one more "
                   f"costs up to ${price * hours:.2f}")
    return 1, ""


def decide(view: PoolView) -> list[Decision]:
    """What to do with one pool now (an empty list: nothing)."""
    if view.paused:
        return []
    stalled = [a for a in view.allocs if view.stalled(a)]
    if stalled:  # its replacement is judged below, without it
        restart = Decision("restart", f"no task started for {view.stall_after:.0f} s (stall_after) "
                           f"while {view.queue_depth} task(s) waited in its queues",
                           count=len(stalled), worker_ids=tuple(a.worker_id for a in stalled))
        rest = replace(view, allocs=[a for a in view.allocs if a not in stalled])
        return [restart, *decide(rest)]
    if view.failures >= PAUSE_AFTER:
        return [Decision("pause", f"{view.failures} submissions in a row failed; "
                         f"paused (retry with `mainboard fleet resume-pool {view.name}`)")]
    goal = target(view)
    staying = [a for a in view.allocs if not view.retiring(a)]  # the retiring are replaced
    pending, current = view.count("pending"), len(staying)
    work = f"{view.queue_depth} task(s) queued, {sum(a.active for a in view.allocs)} in hand" \
        + (f", {view.outstanding} batch(es) awaited by runs" if view.outstanding else "") \
        + (f", {view.goal_jobs} allocation(s) wanted for runs' deadlines"
           if view.goal_jobs is not None else "")
    if goal > current:
        room = view.pool.backlog - pending
        wanted = min(goal - current, max(0, room))
        walltime = walltime_for(view.pool, view.need_s)
        n, why = _affordable(view, wanted, walltime)
        sized = f"; walltime {walltime} s for a {view.need_s:.0f} s time need" \
            if walltime != view.pool.walltime and view.need_s else ""
        if n > 0:
            return [Decision("submit", f"{work}: {current} allocation(s), target {goal}{sized}",
                             count=n, target=goal, walltime=walltime)]
        why = why or f"backlog {view.pool.backlog}: {pending} allocation(s) pending already"
        return [Decision("hold", f"{work}, target {goal}; not submitting: {why}", target=goal)]
    if goal >= current or not view.pool.autoscaled:
        return []  # a fixed pool's workers stay until `fleet down`
    surplus = current - goal
    out: list[Decision] = []
    waiting = [a.worker_id for a in staying if a.state == "pending"][:surplus]
    if waiting:
        out.append(Decision("cancel", f"{work}: target {goal}, {len(waiting)} pending "
                            "allocation(s) no longer needed", count=len(waiting),
                            worker_ids=tuple(waiting), target=goal))
        surplus -= len(waiting)
    timeout = 0 if view.release else view.pool.idle_timeout
    idle = [a.worker_id for a in staying if a.state == "running" and a.active == 0
            and a.idle_s is not None and a.idle_s >= timeout][:surplus]
    if idle:
        why = "a run's error target met: released now" if view.release \
            else f"idle past idle_timeout {timeout} s"
        out.append(Decision("retire", f"{work}: target {goal}, {why}", count=len(idle),
                            worker_ids=tuple(idle), target=goal))
    return out


__all__ = ["PAUSE_AFTER", "Alloc", "Decision", "PoolView", "decide", "lead_time", "target",
           "walltime_for"]
