"""What lets a coordinator's iterations overlap: receipts written behind it, in order, and
the record of an iteration sent out before the one in hand was merged.

Why apart from the coordinator: an iteration's own bookkeeping (the receipt's fsync, the
snapshot, the merge, the next dispatch) used to stand between two iterations while the
workers waited. Two things take it off that path, each with one rule that keeps a resumed
run identical:

- :class:`ReceiptWriter` appends a coordinator's receipts on a thread of its own, in the
  order they were handed over (one thread, one queue), and the coordinator waits for it
  (``flush``) before it returns, fails or halts. A crash before a line is written is a
  crash before that iteration was recorded: the resume redoes it, from the same seeds.
- :class:`Launch` is one iteration whose batches are out. The coordinator sends iteration
  k+1 while k is still being computed only when k+1's sizes and sampler do not depend on
  k's results (:meth:`~mainboard.integrators.driver.RunState.lookahead`); once k is merged,
  the launch is used only if the real sizes and sampler snapshot are byte for byte the
  ones sent (:meth:`Launch.matches`), else it is dropped and its messages refused.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from mainboard import keys
from mainboard.integrators.driver import RunState
from mainboard.receipts import Payload
from mainboard.runs.store import RunStore
from mainboard.tasks.bundles import Bundle
from mainboard.tasks.codec import dumps
from mainboard.tasks.dispatch import Dispatch
from mainboard.tasks.outage import Outage

OUTAGE_ATTEMPTS = 100  # attempts sent after the n-th broker outage are numbered from 100 n
PIPELINE_ENV = "MAINBOARD_PIPELINE"  # "0": no iteration is sent ahead (bench/overhead.py)


def iteration_keys(run_id: str, k: int) -> list[str]:
    """The keys one iteration uses, sampler first (deleting it makes late writes no-ops)."""
    return [keys.iteration_sampler(run_id, k), keys.iteration_results(run_id, k),
            keys.iteration_errors(run_id, k), keys.iteration_done(run_id, k),
            keys.iteration_progress(run_id, k)]


@dataclass
class Launch:
    """Iteration ``k``: its sizes and sampler bytes as sent, the batches still to come,
    the units they went out in, and what the sending depended on (the broker outages
    ridden out, the owner generation)."""

    k: int
    sizes: list[int]
    sampler: bytes
    pending: set[int]
    units: list[Bundle]
    outages: int
    gen: int
    base: int  # attempt numbers of this sending start here
    ahead: bool = False  # sent before the iteration before it was merged
    sent_at: float = field(default_factory=time.time)

    def matches(self, k: int, sizes: list[int], sampler: bytes, outages: int,
                gen: int) -> bool:
        """Whether this launch is iteration ``k`` exactly as it is to be sent now."""
        return (self.k, self.sizes, self.sampler, self.outages, self.gen) == \
            (k, sizes, sampler, outages, gen)


class Launcher:
    """Sends a run's iterations: the one in hand, and the next one ahead where the run's
    state says its batches do not depend on this one's results, the run is fused (a
    chained run's later stages share the queue) and its bundles were sized from a measured
    batch (the first iteration's)."""

    def __init__(self, r: redis.Redis, run_id: str, dispatch: Dispatch, outage: Outage,
                 slots: Callable[[], int]) -> None:
        self.r, self.run_id, self.dispatch, self.outage = r, run_id, dispatch, outage
        self.slots = slots  # worker slots known to be there
        self.enabled = os.environ.get(PIPELINE_ENV, "1") != "0"
        self.ahead: Launch | None = None  # sent before the iteration before it was merged

    def launch(self, k: int, sizes: list[int], sampler: bytes, ahead: bool = False) -> Launch:
        """Publish iteration ``k``'s sampler and send what is not stored yet (a resumed or
        redone iteration keeps its stored batches), in one round trip to start."""
        with self.r.pipeline(transaction=False) as pipe:
            pipe.set(keys.iteration_sampler(self.run_id, k), sampler)
            pipe.delete(keys.iteration_errors(self.run_id, k), keys.iteration_done(self.run_id, k))
            pipe.hkeys(keys.iteration_results(self.run_id, k))
            stored = pipe.execute()[-1]
        pending = set(range(len(sizes))) - {int(f) for f in stored}
        base = OUTAGE_ATTEMPTS * self.outage.count  # after an outage: numbers never used yet
        units = self.dispatch.plan(pending, self.slots())
        # One message per unit (bundle or chain), not a group: a group subscribes the result
        # backend to its id, and a dangling subscription raises at exit once the broker is
        # gone. All of them go out in one pipeline.
        with self.dispatch.sending(early=not ahead):
            for unit in units:
                self.dispatch.send(k, unit, sizes, base)
        return Launch(k, sizes, sampler, pending, units, self.outage.count, self.dispatch.gen,
                      base, ahead)

    def take(self, k: int, sizes: list[int], sampler: bytes) -> Launch:
        """Iteration ``k`` sent: the launch sent ahead when it is exactly this one, again
        after an outage (what is stored is kept), else now."""
        launch = self.ahead if self.ahead is not None and self.ahead.k == k else None
        if launch is not None:  # else none, or k+1 sent before an outage made this a redo
            self.ahead = None
            if not launch.matches(k, sizes, sampler, launch.outages, self.dispatch.gen):
                self.drop(launch)
                launch = None
        if launch is None or launch.outages != self.outage.count:
            launch = self.launch(k, sizes, sampler)
        return launch

    def send_ahead(self, state: RunState, sizes: list[int]) -> None:
        """Send the iteration after the one in hand (of ``sizes``) now, when its batches do
        not depend on that one's results (``RunState.lookahead``): the workers go on while
        it is merged and recorded."""
        if self.ahead is not None or not self.enabled:  # sent already (before an outage)
            return
        if not self.dispatch.fused:  # a chain's later stages would queue behind the next
            return  # iteration's first ones: this iteration would end later, not earlier
        if self.dispatch.sizer.per_batch_s is None:
            return  # bundles not sized from a measured batch yet: one per batch, far too many
        nxt = state.lookahead(sizes)
        if nxt is not None:
            after, sampler = nxt
            self.ahead = self.launch(state.iteration + 1, after, dumps(sampler.snapshot()),
                                     ahead=True)

    def drop(self, launch: Launch) -> None:
        """An iteration sent ahead that is not used: its keys go (late results are no-ops)
        and, as the same iteration is sent again, a new owner generation refuses its
        messages' results."""
        self.r.delete(*iteration_keys(self.run_id, launch.k))
        if launch.gen == self.dispatch.gen:
            self.dispatch.gen += 1
            self.r.hset(keys.run_state(self.run_id), "generation", self.dispatch.gen)

    def discard(self) -> None:
        """The run ends: an iteration sent ahead goes (its late results are no-ops; a
        resume runs under a new owner generation)."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            self.r.delete(*iteration_keys(self.run_id, ahead.k))


class ReceiptWriter:
    """A run store's ``record`` on a thread: lines in the order given, each fsynced as
    before; ``flush`` waits for all of them and raises what writing one raised.

    ``hold`` keeps the thread from starting on a line until ``release``: making an
    iteration's line (a VEGAS+ snapshot is tens of thousands of floats: pydantic's dump and
    the encoding, 25-45 ms with ``json``, ~2.5 ms with orjson) holds the GIL, and written at
    once it competed with the coordinator's dispatch of the next iteration while every
    worker waited; held until that dispatch is out, it is written while the workers compute.
    Held, not handed over later: the line is queued at once, so every way out of the run
    (flush, close) still writes it, in order."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._queue: queue.Queue[Payload | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._open = threading.Event()
        self._open.set()

    def hold(self) -> None:
        """Lines handed over from now on wait until :meth:`release` (or a flush)."""
        self._open.clear()

    def release(self) -> None:
        """Write what waits, and what comes, at once again."""
        self._open.set()

    def record(self, payload: Payload) -> None:
        """Queue one receipt line (the thread starts with the first)."""
        self._raise()
        if self._thread is None:
            self._thread = threading.Thread(target=self._write, name="receipts", daemon=True)
            self._thread.start()
        self._queue.put(payload)

    def _write(self) -> None:
        while (payload := self._queue.get()) is not None:
            self._open.wait()
            try:
                if self._error is None:  # after a failure nothing later is written
                    self.store.record(payload)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the coordinator
                self._error = exc
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def flush(self) -> None:
        """Wait until every queued line is written."""
        self.release()
        self._queue.join()
        self._raise()

    def close(self) -> None:
        """Write what is queued, then end the thread."""
        self.release()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        self._raise()


__all__ = ["OUTAGE_ATTEMPTS", "PIPELINE_ENV", "Launch", "Launcher", "ReceiptWriter",
           "iteration_keys"]
