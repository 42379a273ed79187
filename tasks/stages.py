"""The per-batch Celery tasks: each a few lines over :mod:`mainboard.integrators.stages`.

A batch travels as a chain ``sample | materialize | transform | evaluate | accumulate``
(``transform`` only when the run has transforms) or ``sample | fused`` when the run sets
``fuse = true``; a process sampler's batch starts at ``materialize`` / ``fused`` with the
latent batch its one owner (the coordinator) produced, and ``sample`` refuses one. Every message carries ``ref`` (run, iteration, batch, n, attempt); the
run spec and the iteration's sampler come from Redis (see :mod:`mainboard.tasks.context`).
The last task of a chain stores the BatchResult with HSETNX (exactly once) and signals
the coordinator. A stage that raises records an error naming the batch, stage and cause
(the coordinator fails the run) and the worker carries on with the next message.

Each task is also callable on its own, e.g. ``mainboard.tasks.sample.delay(run_id, 0, 0, 1000)``
once the coordinator has published the run and the iteration's sampler.

External processes of a run are scoped to the coordinator's run id and ended when the run
ends (see :mod:`mainboard.tasks.context`) and when the worker process shuts down.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

import numpy as np
from celery import Task, shared_task
from celery.exceptions import Ignore
from celery.signals import worker_process_shutdown, worker_shutdown

from mainboard import keys
from mainboard.errors import BatchError
from mainboard.integrators import stages
from mainboard.integrators.domain import Batch
from mainboard.integrators.owner import owned
from mainboard.integrators.samplers import Sampler
from mainboard.integrators.seeding import LatentBatch
from mainboard.integrators.stages import BatchResult
from mainboard.redisclient import min_replicas, wait_replicas
from mainboard.tasks import STAGE_PREFIX, broker_url_of, codec, telemetry, timeneed
from mainboard.tasks.bundles import store_bundle
from mainboard.tasks.context import BatchRef, Skip, StageContext, release_all
from mainboard.tasks.outage import REDIS_DOWN
from mainboard.tasks.routing import BatchTask

Message = dict[str, Any]
log = logging.getLogger("mainboard.tasks.stages")


def _stage_task(name: str) -> Callable[[Callable[..., Any]], Any]:
    """Register a batch stage: its own name, the batch queue, the hardened delivery options."""
    return shared_task(name=STAGE_PREFIX + name, bind=True, base=BatchTask,
                       acks_late=True, reject_on_worker_lost=True)


def run_stage(task: Task, ref: BatchRef, stage: str, body: Callable[[StageContext], Any],
              *, final: bool = False, claim: bool = True,
              members: Sequence[int] | None = None) -> Any:
    """Run ``body`` under a heartbeat claim; on failure record an error record, then re-raise.

    A delivery with nothing to do (duplicate, stale) ends its chain quietly; called on its
    own, the task returns ``{"ref", "stored": False, "skipped": why}`` instead. An instant
    stage (``claim=False``) skips the heartbeat claim and only reports its progress; a lost
    one is noticed because later batches overtake it (see :mod:`mainboard.tasks.liveness`).
    A bundle (``members``: its batch indices) checks its members itself and ships one span
    per member.
    """
    ctx = StageContext(broker_url_of(task.app.conf), ref, stage, task.request.hostname)
    ship = telemetry.enter(ctx.url, task.request.hostname or ctx.holder, ref.run,
                           ref.iteration + 1, ref.batch, stage)
    began, clock = time.time(), time.perf_counter()
    try:
        timeneed.check(task.request)  # given up for its time need: the batch's error
        if members is not None:
            ctx.stage = "sample"  # a load failure is its first stage's, as in a chain
        # an instant stage leaves the check to the next one, a bundle to its body; a
        # sampling one is held (pause, stop) with its claim staked, all in one round trip
        held = ctx.claim() if claim else None
        ctx.load(check_stored=claim and members is None,
                 hold=(members or ()) if stage == "sample" or members is not None else None,
                 claim=held)
        with held if held is not None else nullcontext(), ctx.processes():
            out = body(ctx)
    except Skip as skip:
        began = 0.0  # nothing ran: no span
        if task.request.chain:
            raise Ignore(str(skip)) from None
        return ctx.forward(stored=False, skipped=str(skip))
    except REDIS_DOWN:
        raise  # the broker, not the batch: never recorded as the batch's failure; re-sent
    except Exception as exc:
        ctx.store_error(exc)
        log.error("stage %s failed: %s: %s", getattr(exc, "stage", None) or stage,
                  type(exc).__name__, exc)
        raise
    finally:
        if began and members is None:
            telemetry.span(ship, stage, ref.run, ref.iteration + 1, ref.batch, ref.n,
                           ref.attempt, began, time.perf_counter() - clock)
    if not final:
        ctx.advance()
    return out


@worker_process_shutdown.connect(dispatch_uid="mainboard.release_processes.pool")
@worker_shutdown.connect(dispatch_uid="mainboard.release_processes.worker")
def _release_at_shutdown(**_: Any) -> None:
    """A pool child (prefork) or the worker itself (solo) is exiting: end its processes
    with the full close -> grace -> SIGTERM -> SIGKILL sequence, never orphaning one; ship
    the run logs and spans still buffered."""
    release_all()
    telemetry.shutdown()


def _ref(message: Mapping[str, Any]) -> BatchRef:
    return BatchRef.from_dict(message["ref"])


def _latent(message: Mapping[str, Any]) -> LatentBatch:
    return LatentBatch.from_dict(message["latent"])


def _pack(arr: np.ndarray) -> Any:
    """An array for the wire, keeping a Fortran layout (sent transposed, C-contiguous)."""
    if arr.ndim == 2 and arr.flags.f_contiguous and not arr.flags.c_contiguous:
        return {"T": arr.T}
    return arr


def _unpack(value: Any) -> np.ndarray:
    return value["T"].T if isinstance(value, dict) else value


def pack_batch(batch: Batch) -> dict[str, Any]:
    """A Batch as codec data with every array's memory layout kept.

    Why: numpy reductions (e.g. a row sum inside an integrand) may add in a different order
    for C- and F-ordered inputs, so a layout change between stages could change the last bit
    and break the bit-identity of chained and fused stages.
    """
    return {"x": _pack(batch.x), "idx": _pack(batch.idx), "weights": batch.weights,
            "aux": {k: _pack(v) for k, v in batch.aux.items()}}


def unpack_batch(data: Mapping[str, Any]) -> Batch:
    """Inverse of :func:`pack_batch`."""
    return Batch.from_dict({"x": _unpack(data["x"]), "idx": _unpack(data["idx"]),
                            "weights": data["weights"],
                            "aux": {k: _unpack(v) for k, v in data.get("aux", {}).items()}})


def _batch(message: Mapping[str, Any]) -> Batch:
    return unpack_batch(message["batch"])


def _evaluate(c: StageContext, message: Mapping[str, Any], batch: Batch) -> dict[str, Any]:
    return stages.evaluate(c.run, c.sampler, _latent(message), batch).to_dict()


def _store(c: StageContext, result: Mapping[str, Any]) -> Message:
    stored = c.store_result(result)
    return c.forward(stored=stored)


@_stage_task("sample")
def sample(self: Task, run_id: str, iteration: int, batch_index: int, n: int,
           attempt: int = 0, gen: int = 0) -> Message:
    """Stage 1: the compact latent batch (seed coordinates and size, no arrays)."""
    ref = BatchRef(run_id, iteration, batch_index, n, attempt, gen)
    return run_stage(self, ref, "sample", lambda c: c.forward(latent=stages.sample(
        c.run, not_owned(c.sampler), iteration, batch_index, n).to_dict()), claim=False)


def not_owned(sampler: Sampler) -> Sampler:
    """Refuse to draw an owned (process) sampler's batch here: only its owner produces them."""
    if owned(sampler) is not None:
        raise BatchError("sample", f"a {sampler.kind!r} sampler's batches are produced by the "
                         "run's coordinator (its one owner); workers start at materialize")
    return sampler


@_stage_task("materialize")
def materialize(self: Task, message: Message) -> Message:
    """Stage 2: concrete points, indices and weights, validated against the domain."""
    return run_stage(self, _ref(message), "materialize", lambda c: c.forward(
        latent=message["latent"],
        batch=pack_batch(stages.materialize(c.run, c.sampler, _latent(message)))))


@_stage_task("transform")
def transform(self: Task, message: Message) -> Message:
    """Stage 3: the run's transforms in order, the batch validated after each."""
    return run_stage(self, _ref(message), "transform", lambda c: c.forward(
        latent=message["latent"], batch=pack_batch(stages.transform(c.run, _batch(message)))))


@_stage_task("evaluate")
def evaluate(self: Task, message: Message, store: bool = False) -> Message:
    """Stage 4: integrand values reduced to a BatchResult (partial sums, training data);
    with ``store=True`` (the coordinator's chains) it also stores it once and signals the
    coordinator, which saves the chain an ``accumulate`` task."""
    if store:
        return run_stage(self, _ref(message), "evaluate", lambda c: _store(
            c, _evaluate(c, message, _batch(message))), final=True)
    return run_stage(self, _ref(message), "evaluate", lambda c: c.forward(
        result=_evaluate(c, message, _batch(message))))


@_stage_task("accumulate")
def accumulate(self: Task, message: Message) -> Message:
    """Stage 5: store the BatchResult once (HSETNX) and signal the coordinator."""
    return run_stage(self, _ref(message), "accumulate", lambda c: _store(
        c, BatchResult.from_dict(message["result"]).to_dict()), final=True)


@_stage_task("fused")
def fused(self: Task, message: Message) -> Message:
    """materialize -> transform -> evaluate -> accumulate in one task, same pure functions."""
    def body(c: StageContext) -> Message:
        batch = stages.transform(c.run, stages.materialize(c.run, c.sampler, _latent(message)))
        return _store(c, _evaluate(c, message, batch))

    return run_stage(self, _ref(message), "fused", body, final=True)


@_stage_task("bundle")
def bundle(self: Task, message: Message) -> Message:
    """Several batches of one iteration (``"batches": [[index, n], ...]``), each sampled
    (or given as a latent batch by the owner: ``"latents"``), materialized, transformed and
    evaluated by its own index, the results stored in one round trip
    (:mod:`mainboard.tasks.bundles`). ``ref`` names the bundle's first batch and attempt."""
    lead = _ref(message)
    members = [(int(i), int(n)) for i, n in message["batches"]]
    latents = message.get("latents")
    node = self.request.hostname

    def body(c: StageContext) -> Message:
        ship = telemetry.shipper(c.url, node or c.holder)
        todo = _unstored(c, lead, members)
        results, clock = [], time.perf_counter()
        for j, (i, n) in todo:
            c.ref = replace(lead, batch=i, n=n)  # an error names the member that failed
            began, t0 = time.time(), time.perf_counter()
            c.stage = "sample"
            latent = LatentBatch.from_dict(latents[j]) if latents is not None else \
                stages.sample(c.run, not_owned(c.sampler), lead.iteration, i, n)
            c.stage = "fused"
            result = stages.process_latent(c.run, c.sampler, latent)
            results.append((i, codec.dumps(result.to_dict())))
            telemetry.span(ship, "fused", lead.run, lead.iteration + 1, i, n, lead.attempt,
                           began, time.perf_counter() - t0)
        c.ref = lead
        slot = f"{node or c.holder}|{os.getpid()}|{threading.get_ident()}"
        stored = store_bundle(c.r, lead.run, lead.iteration, lead.batch, lead.attempt, results,
                              time.perf_counter() - clock, slot, lead.gen)
        if stored > 0:  # counted: on a replica too before a failover can lose it
            wait_replicas(c.r, min_replicas(c.url))
        return c.forward(stored=stored > 0, batches=[i for _, (i, _) in todo])

    # the stage is "fused" (claims, spans): the bundle runs that stage for each member
    return run_stage(self, lead, "fused", body, final=True, members=[i for i, _ in members])


def _unstored(c: StageContext, lead: BatchRef, members: list[tuple[int, int]]
              ) -> list[tuple[int, tuple[int, int]]]:
    """(position, member) of the members not stored yet; a first attempt skips the look-up
    (the coordinator sends only unstored batches; a late duplicate is refused per batch)."""
    if lead.attempt == 0:
        return list(enumerate(members))
    results = keys.iteration_results(lead.run, lead.iteration)
    with c.r.pipeline(transaction=False) as pipe:
        for i, _ in members:
            pipe.hexists(results, str(i))
        stored = pipe.execute()
    return [(j, m) for j, (m, done) in enumerate(zip(members, stored, strict=True)) if not done]


__all__ = ["accumulate", "bundle", "evaluate", "fused", "materialize", "pack_batch", "run_stage", "sample",
           "transform", "unpack_batch"]
