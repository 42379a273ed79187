"""Liveness of one iteration's batches: which attempt is alive, which batch to re-send.

Why the coordinator and not the broker: a message held by a worker that dies whole
(SIGKILL, node failure) comes back from Redis only after the visibility timeout (hours).
The coordinator knows every batch it sent, so it watches them itself. Each attempt of a
batch is in one of three states:

- ``queued``: sent (or handed on to its next stage) and not running yet;
- ``running``: its claim key is alive (a worker's heartbeat thread refreshes it);
- ``dead``: the claim vanished without the stage finishing (the worker died); or its first
  message was overtaken (a batch sent after it started more than a grace period ago while it
  never moved: queues are FIFO, so the worker that took it is gone); or it stayed queued past
  a deadline adapted to the observed batch durations and worker count.

A batch whose attempts are all dead gets a new attempt. A batch running far longer than
usual while nothing else waits (a straggler) gets a speculative duplicate. Duplicates are
harmless: results are stored set-if-absent per batch. Attempts are bounded, so a batch
that kills every worker it touches fails the run instead of looping forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import redis

from mainboard import keys
from mainboard.errors import LostBatch

QUEUE_FLOOR_S = 15.0  # never call a queued attempt lost sooner than this...
DEATH_FLOOR_S = 3.0  # ...unless a worker died since it was queued: it may have held it
QUEUE_FACTOR = 4.0
FIFO_GRACE_S = 3.0  # how long a later batch may have moved before an unmoved one counts lost
STRAGGLER_FLOOR_S = 10.0
STRAGGLER_FACTOR = 5.0
MAX_ATTEMPTS = 6
MAX_KILLS = 3  # a batch whose running worker died this often is what kills them
KILLED = "its worker stopped heartbeating"
EWMA = 0.3

AttemptKey = tuple[int, int]  # (batch index, attempt number)


@dataclass
class Timing:
    """Observed batch durations and parallelism, carried from one iteration to the next."""

    batch_s: float | None = None
    workers: int = 0
    moved: bool = False  # any batch of the run ever seen claimed or past a stage

    def record(self, seconds: float) -> None:
        """Fold one finished batch's duration (first claim to result) into the average."""
        self.batch_s = seconds if self.batch_s is None else (
            EWMA * seconds + (1 - EWMA) * self.batch_s)

    @property
    def typical_s(self) -> float:
        """A batch's usual duration (1 s until one was observed)."""
        return self.batch_s if self.batch_s is not None else 1.0

    def queue_deadline(self, queued: int, floor: float = QUEUE_FLOOR_S) -> float:
        """How long an attempt may wait unclaimed: its turn in the queue, with slack."""
        waves = 1 + queued / max(1, self.workers)
        return max(floor, QUEUE_FACTOR * self.typical_s * waves)

    def straggler_after(self) -> float:
        """How long a started attempt may take before a duplicate is sent."""
        return max(STRAGGLER_FLOOR_S, STRAGGLER_FACTOR * self.typical_s)


@dataclass
class Attempt:
    """One sending of one batch, as last observed."""

    batch: int
    number: int
    state: str = "queued"
    since: float = 0.0
    progress: int = 0
    started: float | None = None  # first time it was seen running
    seq: int = 0  # sending order: queues are FIFO, so a lower seq is taken first
    moved: bool = False  # ever seen claimed or past a stage
    why: str = ""  # why it was declared dead


@dataclass
class Liveness:
    """Watches the attempts of one iteration and says which batches need a new one."""

    timing: Timing
    clock: Callable[[], float] = time.monotonic
    max_attempts: int = MAX_ATTEMPTS
    attempts: dict[int, list[Attempt]] = field(default_factory=dict)
    marks: list[tuple[int, float]] = field(default_factory=list)  # (seq, when it first moved)
    death: float | None = None  # when a worker death last became known
    _sent: int = 0

    def worker_died(self) -> None:
        """A worker is known dead: what it held is lost, so attempts queued before now
        count as lost after DEATH_FLOOR_S (not QUEUE_FLOOR_S) if nobody takes them."""
        self.death = self.clock()

    def sent(self, batch: int, number: int) -> None:
        """Record that attempt ``number`` of ``batch`` was just sent."""
        self._sent += 1
        self.attempts.setdefault(batch, []).append(
            Attempt(batch, number, since=self.clock(), seq=self._sent))

    def _moved(self, a: Attempt, now: float) -> None:
        if not a.moved:
            a.moved = True
            self.marks.append((a.seq, now))

    def next_number(self, batch: int) -> int:
        """The attempt number to use for the next sending of ``batch``."""
        return len(self.attempts.get(batch, []))

    def finished(self, batch: int) -> None:
        """The batch's result (or error) is stored: learn its duration, stop watching it."""
        now = self.clock()
        group = self.attempts.pop(batch, [])
        for a in group:
            self._moved(a, now)
        starts = [a.started for a in group if a.started is not None]
        if starts:
            self.timing.record(self.clock() - min(starts))

    def watched(self) -> list[Attempt]:
        """Every attempt of every unfinished batch."""
        return [a for group in self.attempts.values() for a in group]

    def update(self, claimed: Mapping[AttemptKey, bool], progress: Mapping[AttemptKey, int]
               ) -> list[tuple[int, str]]:
        """Fold in one observation; return (batch, reason) for each batch to send again."""
        now = self.clock()
        for a in self.watched():
            key = (a.batch, a.number)
            done = progress.get(key, 0)
            if claimed.get(key, False):
                if a.state != "running":
                    a.state, a.since = "running", now
                a.started = now if a.started is None else a.started
            elif done > a.progress:  # a stage finished; the next one waits in the queue
                a.state, a.since = "queued", now
            elif a.state == "running":  # claim expired without progress: its worker died
                a.state, a.since, a.why = "dead", now, KILLED
            a.progress = max(a.progress, done)
            if a.state == "running" or a.progress:
                self._moved(a, now)
        running = sum(a.state == "running" for a in self.watched())
        # A stage that finished was run by a worker, even if no poll ever saw its claim.
        self.timing.moved = self.timing.moved or bool(self.marks)
        self.timing.workers = max(self.timing.workers, running, int(self.timing.moved))
        return self._decide(now)

    def workers_alive(self, count: int) -> None:
        """Fleet workers seen heartbeating: the queue deadline applies once any exists."""
        self.timing.workers = max(self.timing.workers, count)

    def _decide(self, now: float) -> list[tuple[int, str]]:
        queued = sum(a.state == "queued" for a in self.watched())
        deadline = self.timing.queue_deadline(queued)
        after_death = self.timing.queue_deadline(queued, DEATH_FLOOR_S)
        overtaken = max((seq for seq, t in self.marks if now - t > FIFO_GRACE_S), default=0)
        resend: list[tuple[int, str]] = []
        for batch, group in self.attempts.items():
            for a in group:
                if a.state != "queued":
                    continue
                if not a.moved and a.seq < overtaken:
                    a.state, a.why = "dead", "overtaken by later batches (its message was lost)"
                elif self.death is not None and a.since <= self.death \
                        and now - a.since > after_death:
                    a.state, a.why = "dead", "not started, and a worker died meanwhile"
                elif (self.timing.workers > 0 or a.moved) and now - a.since > deadline:
                    a.state, a.why = "dead", f"not started within {deadline:.0f} s"
            live = [a for a in group if a.state != "dead"]
            if not live:
                reason = group[-1].why
            elif (len(live) == 1 and live[0].state == "running" and queued == 0
                  and now - (live[0].started or now) > self.timing.straggler_after()):
                reason = "straggler: running far longer than usual"
            else:
                continue
            kills = sum(a.why == KILLED for a in group)
            if kills >= MAX_KILLS:
                raise LostBatch(f"batch {batch} killed its worker {kills} times (each died "
                                "while running it; a preemption between batches does not "
                                "count); it fails the run: check what it computes")
            if len(group) >= self.max_attempts:
                raise LostBatch(f"batch {batch} was lost {len(group)} times ({reason}); "
                                "the workers running it keep dying: check their logs")
            resend.append((batch, reason))
        return resend


class Deaths:
    """Notices workers dying: local worker processes that exited, and fleet workers whose
    registry heartbeat stopped (a fleet worker beats every few seconds)."""

    def __init__(self, r: redis.Redis, exited: Callable[[], int] | None = None,
                 stale_s: float = 15.0, every_s: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.r, self.exited, self.stale_s, self.every_s, self.clock = \
            r, exited, stale_s, every_s, clock
        self._exited = exited() if exited else 0
        self._fresh: set[bytes] | None = None
        self._next = 0.0

    @property
    def alive(self) -> int:
        """How many fleet workers beat within ``stale_s`` at the last poll."""
        return len(self._fresh or ())

    def poll(self) -> bool:
        """True when a death became known since the last call (checked at most every_s)."""
        now = self.clock()
        if now < self._next:
            return False
        self._next = now + self.every_s
        died = False
        if self.exited is not None:
            count = self.exited()
            died, self._exited = count > self._exited, count
        fresh = set(self.r.zrangebyscore(keys.workers_index(), now - self.stale_s, "+inf"))
        fresh -= self._retired(fresh, now)
        if self._fresh is not None and self._fresh - fresh:
            died = True
        self._fresh = fresh
        return died

    def _retired(self, nodes: set[bytes], now: float) -> set[bytes]:
        """Nodes whose retire time (``retire_at`` in their registry) has come: gone for new
        work though they still beat while they drain. A retiring worker may sit on a message
        it received but never started until its allocation ends (measured, issue 19:
        bench/bench_recovery.py --faults walltime); counted as a death, that batch is re-sent
        after DEATH_FLOOR_S, not the 15 s queue floor."""
        ordered = sorted(nodes)
        with self.r.pipeline(transaction=False) as pipe:
            for node in ordered:
                pipe.hget(keys.worker(node.decode()), "retire_at")
            replies = pipe.execute()
        gone = set()
        for node, at in zip(ordered, replies, strict=True):
            try:
                if at is not None and float(at) <= now:
                    gone.add(node)
            except ValueError:
                continue
        return gone


def observe(r: redis.Redis, run_id: str, iteration: int, attempts: list[Attempt]
            ) -> tuple[dict[AttemptKey, bool], dict[AttemptKey, int]]:
    """Claims and stage progress of ``attempts``, read atomically in one round trip."""
    claim_keys = [keys.batch_claim(run_id, iteration, a.batch, a.number) for a in attempts]
    with r.pipeline(transaction=True) as pipe:
        if claim_keys:
            pipe.mget(claim_keys)
        pipe.hgetall(keys.iteration_progress(run_id, iteration))
        replies = pipe.execute()
    holders = replies[0] if claim_keys else []
    claimed = {(a.batch, a.number): h is not None
               for a, h in zip(attempts, holders, strict=True)}
    progress: dict[AttemptKey, int] = {}
    for raw_field, raw_count in replies[-1].items():
        batch, _, number = raw_field.decode().partition(":")
        progress[(int(batch), int(number))] = int(raw_count)
    return claimed, progress


__all__ = ["Attempt", "Deaths", "Liveness", "Timing", "observe"]
