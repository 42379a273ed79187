"""The run coordinator: one iteration at a time, batches on workers, numbers as if local.

Per iteration k: publish the sampler snapshot of k, send its batches (bundles of a fused
run, per-batch chains of a chained one: :mod:`~mainboard.tasks.dispatch`; no groups or
chords), block on the completion list while watching liveness (re-sending lost units),
read the stored BatchResults and merge them in batch-index order, fold the merge into the
:class:`~mainboard.integrators.driver.RunState` (accumulate, adapt), snapshot to Redis and
to a receipt line, check the stop condition. The arithmetic is the integrators' own, so
the result is bit-identical to ``integrate_local`` whatever the number of workers.

Runs with external processes: the coordinator's own sampler may be a process (it adapts
and snapshots here), and it learns the process evaluator's ``initialize`` metadata before it
starts (:func:`~mainboard.integrators.stages.prepare_sampler`); both are ended when the run
ends, and workers end theirs when they see the run's final status.

A process sampler has one owner, this coordinator (:mod:`~mainboard.integrators.owner`):
planning iteration k produces its latent batches here, in batch order, and each batch's
chain starts at ``materialize`` (or its bundle carries them) with the points in the message; re-sends and
the redo after a broker outage send the same latent batch again, never a new one. Workers
never start a sampler process. A resumed run restarts the sampler from its last snapshot
and drops the unfinished iteration's stored results (their batches came from the dead
coordinator's process), so it is produced again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import redis
from celery import Celery

from mainboard import keys
from mainboard.errors import BatchError, IntegrationFailed, LostBatch, MergeError, ProcessError
from mainboard.integrators.driver import RunResult, RunState
from mainboard.integrators.owner import owned
from mainboard.integrators.plain import to_plain
from mainboard.integrators.process.adapters import run_scope
from mainboard.integrators.stages import (
    BatchResult,
    IterationResult,
    merge_results,
    prepare_sampler,
    release_processes,
)
from mainboard.receipts import IterationDone, RunFailed, RunFinished
from mainboard.runs.store import RunStore
from mainboard.tasks import BATCH_QUEUE
from mainboard.tasks.bundles import parse_done, pop_done
from mainboard.tasks.codec import dumps, loads
from mainboard.tasks.dispatch import Dispatch
from mainboard.tasks.goal import Forecaster
from mainboard.tasks.lease import Lease
from mainboard.tasks.liveness import Deaths, Liveness, Timing, observe
from mainboard.tasks.outage import BROKER_ERRORS, DEFAULT_BUDGET_S, Outage
from mainboard.tasks.pipeline import Launch, Launcher, ReceiptWriter, iteration_keys
from mainboard.tasks.steering import Halt, Steering, relay_process_lines

POLL_S = 0.25
IDLE_WARNING_S = 30.0
log = logging.getLogger(__name__)
@dataclass(frozen=True)
class Progress:
    """What a progress display needs after each iteration."""

    run_id: str
    iteration: int
    samples: int
    max_samples: int | None
    estimate: Any
    error: Any
    samples_per_s: float
    wall_s: float


def publish_run(r: redis.Redis, run_id: str, spec: dict[str, Any],
                places: dict[str, Any] | None = None) -> None:
    """Store the run definition where workers look it up (with ``places``, where its
    files are: see tasks.paths), and index the run."""
    with r.pipeline(transaction=True) as pipe:
        pipe.set(keys.run_definition(run_id), dumps(spec))
        if places:
            pipe.set(keys.run_places(run_id), json.dumps(places))
        pipe.zadd(keys.runs_index(), {run_id: time.time()}, nx=True)
        pipe.execute()


def clear_run(r: redis.Redis, run_id: str, keep: tuple[str, ...] = ()) -> None:
    """Delete every live key of a run (a fresh start), the lease and definition excepted."""
    doomed = [k for k in r.scan_iter(match=keys.run_pattern(run_id), count=500)
              if k.decode() not in keep]
    samplers = [k for k in doomed if k.endswith(b":sampler")]
    if samplers:  # first: stale batches become no-ops before their hashes go
        r.delete(*samplers)
    if doomed:
        r.delete(*doomed)


class Coordinator:
    """Drives one run from its current state to a stop condition."""

    def __init__(self, app: Celery, r: redis.Redis, store: RunStore, run_id: str,
                 state: RunState, *, progress: Callable[[Progress], None] | None = None,
                 poll_s: float = POLL_S, wall_before: float = 0.0,
                 health: Callable[[], None] | None = None,
                 exited: Callable[[], int] | None = None, lease: Lease | None = None,
                 broker: str = "the broker", outage_budget: float = DEFAULT_BUDGET_S,
                 places: dict[str, Any] | None = None, workers: int = 0,
                 final: bool = True) -> None:
        self.final = final  # False: one task of a task list; the run goes on after it
        self.app, self.r, self.store, self.run_id, self.state = app, r, store, run_id, state
        self.places = places  # where the run's files are (tasks.paths.places), for workers
        self.progress, self.poll_s = progress, poll_s
        self.wall_before = wall_before  # time earlier executions of a resumed run took
        self.health = health  # raises when the workers this run depends on are gone
        self.warned_idle = False
        self.timing = Timing()
        self.lease = lease if lease is not None else Lease(r, run_id)
        self.outage = Outage(r, broker, run_id, outage_budget)
        self.deaths = Deaths(r, exited)
        self._published = 0  # outages after which the run's keys were written again
        self.workers = workers  # worker slots known to be there (local workers started)
        self._guarded = 0.0  # when the broker and the lease were last checked
        self.dispatch = Dispatch(app, run_id, state.run.spec, lambda: self.timing.batch_s)
        self.receipts = ReceiptWriter(store)  # this coordinator's receipts, in order, behind it
        self.steer = Steering(r, self.receipts, run_id)
        self.launcher = Launcher(r, run_id, self.dispatch, self.outage,
                                 lambda: max(self.workers, self.deaths.alive))
        self._control_read = False  # a pause/stop request was read since the last boundary
        self.forecast: Forecaster | None = None  # runs with an error target (tasks/goal)
        self.outage.note = self.steer.log  # outages and warnings reach `runs logs` too

    # ----- one iteration ------------------------------------------------------------------

    def _fail(self, k: int, entry: bytes) -> IntegrationFailed:
        batch = int(entry[2:])
        raw = self.r.hget(keys.iteration_errors(self.run_id, k), str(batch))
        rec = loads(raw) if raw else {"stage": "?", "error": "unknown", "message": "?",
                                      "worker": "?"}
        cause = rec["message"] if rec["error"] == "BatchError" else \
            f"{rec['error']}: {rec['message']}"
        return IntegrationFailed(f"run {self.run_id}: batch {batch} of iteration {k} failed "
                                 f"at stage {rec['stage']!r} on worker {rec['worker']}: {cause}",
                                 batch=batch, stage=rec["stage"])

    def _collect(self, launch: Launch) -> IterationResult:
        """Wait for the batches of a launched iteration, merge it."""
        k, sizes, pending, base = launch.k, launch.sizes, launch.pending, launch.base
        results_key, done_key = keys.iteration_results(self.run_id, k), \
            keys.iteration_done(self.run_id, k)
        live = Liveness(self.timing)
        for unit in launch.units:
            live.sent(unit.lead, base)
        self.dispatch.use(launch.units)
        ahead = self.launcher.ahead
        if not launch.ahead:  # else said as the iteration before it ended
            self._demand(len(pending))
        started = time.monotonic()
        next_check = started + self.poll_s
        while pending - self.steer.parked or (pending and not self.steer.halting):
            # Event-driven: block on the done list; the watch runs every poll_s regardless.
            entries = pop_done(self.r, done_key, max(0.001, next_check - time.monotonic()))
            if entries:
                self._drain(k, entries, pending, live)
            if pending and time.monotonic() >= next_check:
                self._watch(k, sizes, live, started, base)
                self._demand(len(pending - self.steer.parked))
                next_check = time.monotonic() + self.poll_s
        if pending:  # halted with batches never sampled: their stored siblings stay
            self._demand(0)
            raise Halt(self.steer.halting or "pause", len(sizes) - len(pending))
        self.steer.mark("complete")
        with self.r.pipeline(transaction=False) as pipe:  # one round trip: the results, and
            self._demand(len(ahead.pending) if ahead is not None else 0, pipe)  # what is out
            pipe.hmget(results_key, [str(i) for i in range(len(sizes))])
            raw = pipe.execute()[-1]
        try:
            return merge_results([BatchResult.from_dict(loads(x)) for x in raw if x is not None],
                                 expected=len(sizes))
        except MergeError as exc:
            raise IntegrationFailed(f"run {self.run_id}: {exc}") from exc

    def _demand(self, outstanding: int, pipe: Any = None) -> None:
        """What this run still waits for, where the fleet's autoscaler reads it (the
        batches a worker holds or that travel between stages are in no queue); ``pipe``:
        said in that pipeline."""
        (pipe if pipe is not None else self.r).hset(
            keys.run_state(self.run_id), mapping={"outstanding": outstanding,
                                                  "queue": BATCH_QUEUE})

    def _drain(self, k: int, entries: list[bytes], pending: set[int], live: Liveness) -> None:
        """Fold done-list entries in: stored batches (a unit complete once all its members
        are), parked batches of a halting run, or a failure (raised)."""
        for entry in entries:
            if entry.startswith(b"e:"):
                raise self._fail(k, entry)
            if entry.startswith(b"p:"):  # not sampled: the run pauses or stops
                self.steer.parked.add(int(entry[2:]))
                continue
            done = parse_done(entry)
            pending.difference_update(done.batches)
            for lead in self.dispatch.completed(done, pending):
                live.finished(lead)

    def _watch(self, k: int, sizes: list[int], live: Liveness, started: float,
               base: int) -> None:
        """Notice a restarted broker, refresh the lease, observe claims and progress,
        re-send lost batches."""
        self.outage.check()
        self.lease.refresh()
        self._guarded = time.monotonic()
        if self.health is not None:
            self.health()
        if self.deaths.poll():
            live.worker_died()
        live.workers_alive(self.deaths.alive)
        claimed, progress = observe(self.r, self.run_id, k, live.watched())
        try:
            resend = live.update(claimed, progress)
        except LostBatch as exc:
            raise IntegrationFailed(f"run {self.run_id}: iteration {k}: {exc}") from exc
        # Only when nothing ever moved: a stage that finished proves a worker exists.
        if (not self.timing.moved and not self.warned_idle
                and time.monotonic() - started > IDLE_WARNING_S):
            self.warned_idle = True
            idle = (f"no worker has started a batch after {IDLE_WARNING_S:.0f} s; is any "
                    f"worker consuming the {BATCH_QUEUE} queue? (celery -A mainboard.tasks.app "
                    f"worker -Q {BATCH_QUEUE})")
            log.warning("run %s: %s", self.run_id, idle)
            self.steer.log("warn", idle)
        self.steer.poll()
        for lead, reason in resend:  # a lost bundle goes out again whole
            unit = self.dispatch.units[lead]
            if self.steer.halting:  # lost while halting: left for the resume, not re-sent
                self.steer.parked.update(unit.members)
                continue
            attempt = base + live.next_number(lead)
            self.steer.resent(k + 1, lead, attempt, reason)
            live.sent(lead, attempt)
            self.dispatch.send(k, unit, sizes, attempt)

    # ----- the loop -----------------------------------------------------------------------

    def _forecast_end(self, reason: str | None) -> None:
        """The forecast says met (the keeper releases the run's allocations now) or ended."""
        if self.forecast is not None:
            with contextlib.suppress(*BROKER_ERRORS):
                self.forecast.ended(reason)

    def _record(self, began: float, samples_before: int) -> None:
        """After an iteration: the run's state and its snapshot's copy in Redis now (the
        next boundary reads the pause/stop request from it); its receipt line once the next
        iteration is out (held writer)."""
        st, k = self.state, self.state.iteration
        snap = st.snapshot()
        result = st.result() if st.accumulator.iterations else None  # None while training
        plain = result.to_dict() if result is not None else {"estimate": None, "error": None}
        wall = time.perf_counter() - began
        snap_plain = to_plain(snap)  # a copy: planning the next iteration cannot touch it
        # the Redis copy encoded now, its arrays as they are (0.05 ms for the 8-d VEGAS+
        # snapshot; its plain lists took 2 ms, walked by the codec's check)
        raw = dumps(snap)

        def write() -> int:  # the run's state; the merged iteration's keys go
            with self.r.pipeline(transaction=False) as pipe:
                pipe.hget(keys.run_state(self.run_id), "stale_refused")
                pipe.hset(keys.run_state(self.run_id), mapping={
                    "status": "running", "iteration": k, "samples": st.samples,
                    "updated": time.time()})
                pipe.set(keys.run_snapshot(self.run_id, k), raw)
                pipe.delete(*iteration_keys(self.run_id, k - 1))
                pipe.hget(keys.run_state(self.run_id), "control")  # for the next boundary
                done = pipe.execute()
            self.steer.seen(done[-1])
            return int(done[0] or 0)

        stale = self.steer.stale(self.dispatch.gen, self.outage.run(write))
        self._control_read = True
        # On the writer's thread, once the next iteration is out (held till then: see
        # ReceiptWriter), its batches computed while this line is encoded and fsynced (a
        # crash before it is written redoes the iteration).
        self.receipts.hold()
        self.receipts.record(IterationDone(
            run_id=self.run_id, iteration=k, samples=st.samples, estimate=plain["estimate"],
            error=plain["error"], snapshot=snap_plain, wall_s=self.wall_before + wall,
            batches=self.steer.batches, times=self.steer.times(), stale_refused=stale))
        if self.forecast is not None and result is not None:
            self.outage.run(partial(self.forecast.after, k, st.samples,
                                    st.samples - st.training_samples, plain))
        if self.progress is not None and result is not None:
            self.progress(Progress(self.run_id, k, st.samples, st.run.spec.stop.max_samples,
                                   result.estimate, result.error,
                                   (st.samples - samples_before) / max(wall, 1e-9), wall))

    @contextlib.contextmanager
    def _processes(self) -> Iterator[None]:
        """Own this run's processes on the coordinator side for the whole run, then end them."""
        run = self.state.run
        if not run.uses_processes:
            yield
            return

        with relay_process_lines(self.steer):
            try:
                with run_scope(self.run_id):
                    yield
            finally:
                try:
                    sampler = self.state.sampler
                    close = getattr(getattr(sampler, "inner", sampler), "close", None)
                    if close is not None:
                        close()
                finally:
                    release_processes(self.run_id)

    @contextlib.contextmanager
    def _sampler_work(self, what: str, stage: str) -> Iterator[None]:
        """A process sampler failing here (start, adapt, snapshot) fails the run, recorded."""
        try:
            yield
        except (BatchError, ProcessError) as exc:
            stage = exc.stage if isinstance(exc, BatchError) else stage
            raise IntegrationFailed(f"run {self.run_id}: {what} failed at stage {stage!r}: "
                                    f"{exc}", stage=stage) from exc

    def run(self, *, fresh: bool) -> RunResult:
        """Iterate until a stop condition holds; a failure is recorded, then raised."""
        with self._processes():
            return self._run(fresh=fresh)

    def _publish(self) -> None:
        """The run's definition and state where workers and viewers look (again after an
        outage: a restarted broker may have lost its last second of writes)."""
        publish_run(self.r, self.run_id, self.state.run.spec.model_dump(mode="json"),
                    self.places)
        self.r.hset(keys.run_state(self.run_id), mapping={
            "status": "running", "coordinator": self.lease.token, "updated": time.time(),
            "generation": self.dispatch.gen})
        self.r.hdel(keys.run_state(self.run_id), "control")
        self._published = self.outage.count

    def _iteration(self, k: int, sizes: list[int], sampler: bytes) -> IterationResult:
        """Send iteration ``k`` (unless it went out ahead, exactly so), send the next one
        ahead where it can, collect ``k``; a broker outage anywhere in here redoes it whole
        (what is stored already is kept)."""
        if time.monotonic() >= self._guarded + self.poll_s:  # else the watch does it in time
            self.outage.check()
            self.lease.refresh()
            self._guarded = time.monotonic()
        if self._published != self.outage.count:
            self._publish()
        launch = self.launcher.take(k, sizes, sampler)
        self.steer.mark("dispatch", launch.sent_at)
        if not self.steer.halting:
            self.launcher.send_ahead(self.state, sizes)
        self.receipts.release()  # the last iteration's line, written while this one computes
        return self._collect(launch)

    def _opening(self, fresh: bool) -> str:
        """The run log's first line of this coordinator (a task list has one per task)."""
        task = self.state.task
        what, new = ("run", fresh) if task is None else (f"task {task}", not self.state.samples)
        return f"{what} started" if new else \
            f"{what} resumed after {self.state.iteration} iterations"

    def _start(self, fresh: bool) -> None:
        # A new owner generation (kept across a fresh start's clearing): results sent by a
        # coordinator before this one are refused by the store scripts, never merged.
        self.dispatch.gen = int(self.r.hget(keys.run_state(self.run_id), "generation") or 0) + 1
        if fresh:
            clear_run(self.r, self.run_id, keep=(self.lease.key, keys.run_inbox(self.run_id),
                                                 keys.run_append_lock(self.run_id)))
        elif owned(self.state.sampler) is not None:  # batches of a dead owner's process
            self.r.delete(*iteration_keys(self.run_id, self.state.iteration))
        self._publish()

    def finish(self, result: RunResult) -> None:
        """The run finished with ``result``: its receipt, log line and status (by ``run``
        itself when ``final``; else by the caller, once no task was appended meanwhile)."""
        self.receipts.flush()  # after every iteration's line
        self.store.record(RunFinished(run_id=self.run_id, result=to_plain(result.to_dict())))
        self.steer.log("info", f"run finished: {result.estimate:.6g} +- "
                       f"{result.error:.2g} from {result.samples:,} samples")
        self.outage.run(lambda: self.r.hset(keys.run_state(self.run_id), "status", "finished"))

    def _run(self, *, fresh: bool) -> RunResult:
        if not self.lease.held:
            self.outage.run(self.lease.acquire)
        k = self.state.iteration
        try:
            with self._sampler_work("starting the process evaluator for the sampler",
                                    "initialize"):
                prepare_sampler(self.state.run, self.state.sampler)
            self.outage.run(lambda: self._start(fresh))
            self.forecast = Forecaster.of(self.r, self.store, self.run_id, self.state.run.spec)
            if self.forecast is not None:
                self.forecast.begin(self.state.iteration, self.state.samples)
            self.steer.log("info", self._opening(fresh))
            began, before = time.perf_counter(), self.state.samples
            while True:
                k = self.state.iteration
                with self._sampler_work(f"the sampler planning iteration {k}", "sample"):
                    sizes = self.state.next_batches()  # an owned sampler produces them here
                if not sizes:
                    break
                self.dispatch.latents = None if self.state.latents is None else \
                    [latent.to_dict() for latent in self.state.latents]
                self.outage.run(partial(self.steer.boundary, not self._control_read))
                self._control_read = False
                with self._sampler_work(f"the sampler before iteration {k}", "snapshot"):
                    sampler = dumps(self.state.sampler.snapshot())
                self.steer.begin(len(sizes))
                merged = self.outage.run(partial(self._iteration, k, sizes, sampler))
                with self._sampler_work(f"the sampler after iteration {k}", "adapt"):
                    self.state.apply(merged)
                    self.steer.mark("adapt")
                    self._record(began, before)
            result = replace(self.state.result(
                wall_s=self.wall_before + time.perf_counter() - began), run_id=self.run_id)
            self._forecast_end(self.state.stop)
            if self.final:
                self.finish(result)
            return result
        except Halt as halt:
            result = replace(self.state.result(
                wall_s=self.wall_before + time.perf_counter() - began), run_id=self.run_id,
                stop_reason=halt.status)
            self._forecast_end(None)
            self.steer.halted(halt, self.state.iteration, result)
            return result
        except IntegrationFailed as exc:
            self.steer.log("error", str(exc), k + 1, exc.batch)
            self.receipts.flush()
            self.store.record(RunFailed(run_id=self.run_id, error=str(exc), iteration=k,
                                        batch=exc.batch, stage=exc.stage))
            with contextlib.suppress(*BROKER_ERRORS):
                self.r.delete(*iteration_keys(self.run_id, k))
                self.r.hset(keys.run_state(self.run_id), "status", "failed")
            self._forecast_end(None)
            raise
        finally:
            with contextlib.suppress(*BROKER_ERRORS):
                self.launcher.discard()  # sent ahead, never used: late results are no-ops
            self.receipts.close()  # every line written before anyone else may write
            if self.final:  # a task list releases it once the run ends
                with contextlib.suppress(*BROKER_ERRORS):
                    self.lease.release()


__all__ = ["Coordinator", "Progress", "clear_run", "iteration_keys", "publish_run"]
