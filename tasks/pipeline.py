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

import queue
import threading
import time
from dataclasses import dataclass, field

from mainboard.receipts import Payload
from mainboard.runs.store import RunStore
from mainboard.tasks.bundles import Bundle


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
    sent_at: float = field(default_factory=time.time)

    def matches(self, k: int, sizes: list[int], sampler: bytes, outages: int,
                gen: int) -> bool:
        """Whether this launch is iteration ``k`` exactly as it is to be sent now."""
        return (self.k, self.sizes, self.sampler, self.outages, self.gen) == \
            (k, sizes, sampler, outages, gen)


class ReceiptWriter:
    """A run store's ``record`` on a thread: lines in the order given, each fsynced as
    before; ``flush`` waits for all of them and raises what writing one raised."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._queue: queue.Queue[Payload | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def record(self, payload: Payload) -> None:
        """Queue one receipt line (the thread starts with the first)."""
        self._raise()
        if self._thread is None:
            self._thread = threading.Thread(target=self._write, name="receipts", daemon=True)
            self._thread.start()
        self._queue.put(payload)

    def _write(self) -> None:
        while (payload := self._queue.get()) is not None:
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
        self._queue.join()
        self._raise()

    def close(self) -> None:
        """Write what is queued, then end the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        self._raise()


__all__ = ["Launch", "ReceiptWriter"]
