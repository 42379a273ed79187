"""Bundles: several batches of one iteration carried by one Celery task.

Why: a small batch costs a worker far less to compute than its task costs to deliver
(Celery publish and delivery, a claim, a Redis round trip to store), so a fused run sends
its batches in bundles sized from the measured compute time (aiming at ``TARGET_S`` per
task, at most ``[batching] max_bundle`` batches), while every batch is still drawn,
evaluated and stored by its own index (HSETNX per batch): the numbers do not depend on the
bundling, the worker count or the order of completion.

A bundle belongs to one iteration (it is cut from that iteration's batch sizes), so it
never straddles what the accumulator merges at once. Its liveness unit is the bundle,
named by its first batch (its ``lead``): one claim, one progress count, one attempt
number. A lost bundle is re-sent whole; its worker skips members stored already, and
the store writes each member set-if-absent, so a batch counts once whatever happens.

The worker stores a bundle's results with one script call (one round trip) and pushes one
entry on the iteration's done list: the member indices it stored, the seconds it computed
and which worker slot ran it (``3,4,5@0.0123@host|pid|thread``); a plain ``7`` from a
chained run's last stage is the one-member case.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import redis

from mainboard import keys

# compute time one task should carry: the top of 50-200 ms, as a task's own cost (claim,
# store, Celery's delivery, ack and events) is ~8-10 ms on a loaded 2-core machine; 0.1 s
# cost the 8-d gaussian on 2 workers 5% more wall and 7% more CPU (docs/performance.md)
TARGET_S = 0.2
PRIOR_S_PER_SAMPLE = 1e-6  # before anything was measured: a guess that keeps tasks short
UNKNOWN_WORKERS = 8  # bundles per iteration at least, before any worker was seen
AUTO_MAX = 4096  # the cap when the run sets no max_bundle
EWMA = 0.3
DRAIN = 1000  # done-list entries taken in one round trip
_BLMPOP = True  # the server knows BLMPOP (Redis >= 7.0) until it says otherwise

# Store a bundle's results in one round trip: only while the iteration is live (its sampler
# key exists), each member at most once (HSETNX), then one done entry naming the members
# stored now; never from an older owner generation of the run (a coordinator that was
# replaced: refused and counted in the run's state, ``stale_refused``). KEYS: sampler,
# results hash, done list, progress hash, claim, run state. ARGV: progress field, entry
# suffix, generation (0: not checked), then (field, payload) per member.
_STORE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if ARGV[3] ~= '0' then
  local owner = redis.call('HGET', KEYS[6], 'generation')
  if owner and owner ~= ARGV[3] then
    redis.call('HINCRBY', KEYS[6], 'stale_refused', (#ARGV - 3) / 2)
    return -2
  end
end
redis.call('DEL', KEYS[5])
redis.call('HINCRBY', KEYS[4], ARGV[1], 1)
local stored = {}
for i = 4, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    stored[#stored + 1] = ARGV[i]
  end
end
if #stored > 0 then redis.call('LPUSH', KEYS[3], table.concat(stored, ',') .. ARGV[2]) end
return #stored
"""


@dataclass(frozen=True)
class Bundle:
    """Batches of one iteration sent together; ``lead`` (the first) names it for liveness."""

    members: tuple[int, ...]

    @property
    def lead(self) -> int:
        """The first member: the bundle's name in claims, progress and re-sends."""
        return self.members[0]


def plan_bundles(indices: Iterable[int], size: int, workers: int = 1) -> list[Bundle]:
    """Cut the batch indices still to compute (of one iteration) into bundles of at most
    ``size``, in index order, so the first bundles hold the first batches.

    Why not all of ``size``: the iteration ends when its last bundle does, so ``workers``
    slots pulling bundles should each get the same work. The count is rounded up to a
    multiple of ``workers`` (while there are batches enough) and the batches spread evenly,
    the larger bundles first: 10 batches of size 2 on 2 slots are 2,2,2,2,1,1 (5 each), not
    2,2,2,2,2 (6 against 4, one slot idle for two batches at every iteration's end)."""
    ordered = sorted(indices)
    if not ordered:
        return []
    slots = max(1, workers)
    count = math.ceil(len(ordered) / max(1, size))  # the fewest bundles of at most size
    count = min(len(ordered), math.ceil(count / slots) * slots)
    base, extra = divmod(len(ordered), count)
    bundles, start = [], 0
    for j in range(count):
        end = start + base + (j < extra)
        bundles.append(Bundle(tuple(ordered[start:end])))
        start = end
    return bundles


@dataclass(frozen=True)
class Done:
    """One entry of the done list: batches stored, and (for a bundle) its compute time."""

    batches: tuple[int, ...]
    seconds: float | None = None
    slot: str = ""


def parse_done(entry: bytes) -> Done:
    """``3,4,5@0.0123@slot`` (a bundle) or ``7`` (a chained run's batch)."""
    parts = entry.decode().split("@", 2)
    batches = tuple(int(x) for x in parts[0].split(","))
    seconds = float(parts[1]) if len(parts) > 1 else None
    return Done(batches, seconds, parts[2] if len(parts) > 2 else "")


def store_bundle(r: redis.Redis, run_id: str, iteration: int, lead: int, attempt: int,
                 results: Sequence[tuple[int, bytes]], seconds: float, slot: str,
                 gen: int = 0) -> int:
    """Store the encoded results of one bundle attempt; how many were stored now (-1: the
    iteration is over, -2: sent by an older owner generation; nothing was written)."""
    args: list[str | bytes] = [f"{lead}:{attempt}", f"@{seconds:.6f}@{slot}", str(gen)]
    for index, payload in results:
        args += [str(index), payload]
    return int(r.register_script(_STORE)(
        keys=[keys.iteration_sampler(run_id, iteration), keys.iteration_results(run_id, iteration),
              keys.iteration_done(run_id, iteration), keys.iteration_progress(run_id, iteration),
              keys.batch_claim(run_id, iteration, lead, attempt), keys.run_state(run_id)],
        args=args))


def pop_done(r: redis.Redis, key: str, timeout: float) -> list[bytes]:
    """Block until the done list has entries (at most ``timeout`` s), then take up to
    ``DRAIN`` of them in the same round trip (BLMPOP; BLPOP then LPOP before Redis 7)."""
    global _BLMPOP
    if _BLMPOP:
        try:
            got = r.blmpop(timeout, 1, key, direction="LEFT", count=DRAIN)
            return list(got[1]) if got else []
        except redis.ResponseError:  # an older server: no BLMPOP
            _BLMPOP = False
    item = r.blpop([key], timeout=timeout)
    return [item[1], *(r.lpop(key, DRAIN) or [])] if item else []


@dataclass
class Sizer:
    """How many batches a bundle carries: enough compute to amortise a task (``TARGET_S``),
    few enough that every worker gets a share of the iteration, at most ``max_bundle``."""

    max_bundle: int | None = None
    per_batch_s: float | None = None  # measured compute seconds per batch (EWMA)
    slots: set[str] = field(default_factory=set)  # worker slots seen this iteration
    before: set[str] = field(default_factory=set)  # ...and the iteration before

    def record(self, done: Done) -> None:
        """Fold one finished bundle's compute time and worker slot in."""
        if done.slot:
            self.slots.add(done.slot)
        if done.seconds is not None and done.batches:
            per = done.seconds / len(done.batches)
            self.per_batch_s = per if self.per_batch_s is None else (
                EWMA * per + (1 - EWMA) * self.per_batch_s)

    def next_iteration(self) -> None:
        """Forget slots not seen for two iterations (a worker that left)."""
        self.before, self.slots = self.slots, set()

    def seen(self, known: int) -> int:
        """Worker slots known to be there or seen lately (0: none yet)."""
        return max(known, len(self.slots | self.before))

    def workers(self, known: int) -> int:
        """Worker slots to share an iteration among (``UNKNOWN_WORKERS`` when nothing is
        known yet)."""
        return self.seen(known) or UNKNOWN_WORKERS

    def size(self, batches: int, batch_size: int, known_workers: int = 0) -> int:
        """Batches per bundle for an iteration of ``batches`` batches of ``batch_size``."""
        per = self.per_batch_s if self.per_batch_s is not None else \
            batch_size * PRIOR_S_PER_SAMPLE
        by_time = max(1, int(TARGET_S / max(per, 1e-9)))
        share = math.ceil(batches / self.workers(known_workers))
        return max(1, min(by_time, share, self.max_bundle or AUTO_MAX))


__all__ = ["TARGET_S", "Bundle", "Done", "Sizer", "parse_done", "plan_bundles", "pop_done",
           "store_bundle"]
