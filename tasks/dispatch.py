"""How one run's batches go out to the workers: bundles, or per-batch chains.

Why apart from the coordinator: what a message looks like (a bundle of a fused run, a chain
``sample | materialize | [transform] | evaluate`` of a chained one, a latent batch from an
owned sampler) and how it is published (one kept producer, messages of a dispatch sent in
one Redis pipeline) change independently of the iteration loop, which only asks for the
units of an iteration, sends them, and learns which units are complete.

A fused run sends bundles (:mod:`mainboard.tasks.bundles`), sized per iteration by a
:class:`~mainboard.tasks.bundles.Sizer`; a chained run (``fuse = false``) sends one chain
per batch whose ``evaluate`` also stores the result (no ``accumulate`` task). Either way the
unit of liveness and re-sending is a :class:`~mainboard.tasks.bundles.Bundle` (one member
for a chain), named by its first batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from celery import Celery, chain
from celery.canvas import Signature
from kombu import Producer

from mainboard.integrators.spec import RunSpec
from mainboard.tasks import BATCH_QUEUE, STAGE_PREFIX
from mainboard.tasks.bundles import Bundle, Done, Sizer, plan_bundles
from mainboard.tasks.context import BatchRef
from mainboard.tasks.steering import shadow_name
from mainboard.tasks.timeneed import HEADER

OPTIONS = {"queue": BATCH_QUEUE, "ignore_result": True}


class Dispatch:
    """The messages of one run's batches, and which units an iteration is cut into."""

    def __init__(self, app: Celery, run_id: str, spec: RunSpec,
                 measured: Callable[[], float | None] = lambda: None) -> None:
        self.app, self.run_id, self.name = app, run_id, spec.name
        self.declared = spec.batching.time_request
        self.measured = measured  # a task's duration as the coordinator observed it
        self.fused = spec.batching.fuse
        self.batch_size = spec.batching.batch_size
        self.stages = ["materialize", *(["transform"] if spec.transforms else []), "evaluate"]
        self.sizer = Sizer(spec.batching.max_bundle)
        self.latents: list[dict[str, Any]] | None = None  # an owned sampler's batches of k
        self.gen = 0  # the run's owner generation: results of an older one are refused
        self.units: dict[int, Bundle] = {}  # lead -> unit, of the iteration in hand
        self.unit_of: dict[int, int] = {}  # batch -> lead
        self._producer: Producer | None = None
        self._batch = contextlib.ExitStack()  # the publish batch open while sending
        self._count = 0  # messages sent in this sending()
        self._early = True  # flushed after the 1st, 2nd, 4th... message

    # ----- planning -------------------------------------------------------------------------

    def plan(self, pending: Iterable[int], workers: int = 0) -> list[Bundle]:
        """Cut the batches still to compute into units (bundles of a fused run, single
        batches of a chained one); ``workers``: worker slots known to be there. They are
        the iteration in hand once :meth:`use` says so (the next one may be planned and
        sent while this one is collected)."""
        todo = sorted(pending)
        if not self.fused:
            return plan_bundles(todo, 1)
        self.sizer.next_iteration()
        size = self.sizer.size(len(todo), self.batch_size, workers)
        return plan_bundles(todo, size, self.sizer.seen(workers))  # evened over real slots

    def use(self, units: list[Bundle]) -> None:
        """Make ``units`` those of the iteration in hand (completions, re-sends)."""
        self.units = {u.lead: u for u in units}
        self.unit_of = {b: u.lead for u in units for b in u.members}

    def completed(self, done: Done, pending: set[int]) -> list[int]:
        """Fold one done entry in: the leads of units now complete (none of their members
        pending)."""
        self.sizer.record(done)
        leads = {self.unit_of[b] for b in done.batches if b in self.unit_of}
        return sorted(lead for lead in leads
                      if not any(m in pending for m in self.units[lead].members))

    # ----- sending --------------------------------------------------------------------------

    @contextlib.contextmanager
    def sending(self, early: bool = True) -> Iterator[None]:
        """One producer for the messages sent inside, published in pipelines (kombu's
        publish batch) instead of a Redis client and a round trip per message. ``early``:
        the batch is flushed after the 1st, 2nd, 4th, 8th... message, so the first units
        reach idle workers at once, the rest in a few round trips; else once, at the end
        (an iteration sent ahead: the workers are busy with the one before)."""
        if self._producer is not None:  # nested: the outer one flushes
            yield
            return
        with self.app.producer_or_acquire() as producer, contextlib.ExitStack() as batch:
            self._producer, self._batch, self._count = producer, batch, 0
            self._early = early
            batch.enter_context(producer.batch())
            try:
                yield
            finally:
                self._producer = None

    def _sent(self) -> None:
        self._count += 1
        if self._early and self._count & (self._count - 1) == 0:  # a power of two: flush, start a new batch
            self._batch.close()
            self._batch.enter_context(self._producer.batch())  # type: ignore[union-attr]

    def headers(self) -> dict[str, float]:
        """The time need each message carries (``mainboard.tasks.timeneed``): the run's
        ``time_request``, else the measured task time once known, else none."""
        need = self.declared if self.declared is not None else self.measured()
        return {HEADER: round(need, 3)} if need else {}

    def send(self, k: int, unit: Bundle, sizes: Sequence[int], attempt: int) -> None:
        """Publish one unit of iteration ``k`` as attempt ``attempt``."""
        with self.sending():
            if self.fused:
                self._send_bundle(k, unit, sizes, attempt)
            else:
                self.chain_for(k, unit.lead, sizes[unit.lead], attempt).apply_async(
                    producer=self._producer, headers=self.headers())
            self._sent()

    def _send_bundle(self, k: int, unit: Bundle, sizes: Sequence[int], attempt: int) -> None:
        lead = unit.lead
        message: dict[str, Any] = {
            "ref": BatchRef(self.run_id, k, lead, sizes[lead], attempt, self.gen).to_dict(),
            "batches": [[i, sizes[i]] for i in unit.members]}
        if self.latents is not None:  # produced here by the owner: the points travel along
            message["latents"] = [self.latents[i] for i in unit.members]
        self.app.send_task(STAGE_PREFIX + "bundle", args=(message,), producer=self._producer,
                           shadow=shadow_name("bundle", self.name, k + 1, lead),
                           headers=self.headers(), argsrepr=bundle_repr(self.run_id, k, unit),
                           kwargsrepr="{}", **OPTIONS)

    def chain_for(self, k: int, batch: int, n: int, attempt: int) -> Signature:
        """The per-batch chain: sample | materialize | [transform] | evaluate (storing)."""
        def sig(stage: str, **extra: Any) -> Signature:
            return self.app.signature(STAGE_PREFIX + stage, **extra,
                                      shadow=shadow_name(stage, self.name, k + 1, batch),
                                      **OPTIONS)

        rest = [sig(stage) for stage in self.stages[:-1]]
        rest.append(sig("evaluate", kwargs={"store": True}))
        if self.latents is not None:  # an owned sampler's batch starts at materialize
            message = {"ref": BatchRef(self.run_id, k, batch, n, attempt, self.gen).to_dict(),
                       "latent": self.latents[batch]}
            return chain(sig(self.stages[0], args=(message,), immutable=True), *rest[1:])
        return chain(sig("sample", args=(self.run_id, k, batch, n, attempt, self.gen),
                         immutable=True),
                     *rest)


def bundle_repr(run_id: str, k: int, unit: Bundle) -> str:
    """What Flower and the task events show as a bundle's arguments.

    Why given: left to Celery, ``saferepr`` walks the message (its ref and every member's
    size) for every task sent, about 1 ms of the coordinator's CPU a bundle, on the path
    between two iterations."""
    first, last = unit.members[0], unit.members[-1]
    return (f"(run {run_id}, iteration {k + 1}, batches {first}..{last}, "
            f"{len(unit.members)} of them)")


__all__ = ["Dispatch", "bundle_repr"]
