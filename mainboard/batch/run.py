"""Batches: many jobs from one ``fleet.toml``, each sent to its target, watched to the end.

``start(board, spec)`` checks every job against its target's queue policy (on this
machine: a refusal sends nothing anywhere) and records ``batch.created``;
``dispatch(board, id)`` mirrors the workspace to each target once and submits its jobs
through ``mainboard.jobs.submit`` (targets in parallel). A target that cannot be
reached costs only its own jobs: each is recorded as ``unreachable`` with the reason,
and the others still go. Every submitted job carries ``MAINBOARD_BATCH`` and
``MAINBOARD_BATCH_JOB`` in its environment (and so in its own ``job.submitted`` line),
so a dispatch interrupted between "the host accepted it" and "the batch recorded it"
adopts the job on resume instead of sending it twice. Secret-looking env values are
never recorded (``batch.created`` names them, redacted): a dispatch reads them back
from the fleet file, and only while it is unchanged (its sha256).

Outcomes come back through the monitor sweep (``mainboard.batch.watch``): pulls and
rental releases happen on every ``mainboard monitor`` pass, watched or not. See
``mainboard.batch.plan`` for ``prepare`` and ``estimate``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mainboard.batch.spec import BatchJob, BatchSpec, load_batch
from mainboard.batch.store import BatchStore, BatchView
from mainboard.bridges.base import new_uid
from mainboard.errors import (
    ConfigError,
    HostError,
    HostUnreachable,
    MainboardError,
    UnknownBatch,
    UserError,
    first_line,
)
from mainboard.hosts.mirror import Mirror
from mainboard.jobs.environment import JobEnvironment, declared, prepare_environment
from mainboard.jobs.job import bridge_of, rental_lease, submit
from mainboard.jobs.job import store_of as job_store
from mainboard.receipts import (
    BatchCreated,
    BatchDispatched,
    BatchDispatchFailed,
    Payload,
    redact_env,
)

if TYPE_CHECKING:
    from mainboard.hosts.access import Host, Hosts

__all__ = ["BatchStore", "BatchView", "BatchSpec", "BatchJob", "UnknownBatch", "dispatch",
           "load_batch", "run", "start", "store_of"]

BATCH_ENV = "MAINBOARD_BATCH"
BATCH_JOB_ENV = "MAINBOARD_BATCH_JOB"
Event = Callable[[Payload], None]


def store_of(board: Hosts) -> BatchStore:
    """The batch receipts of the Board's workspace."""
    return BatchStore(board.config.state_dir)


def _spec(board: Hosts, spec: BatchSpec | str | Path) -> BatchSpec:
    """A loaded batch spec as given, or loaded from its path against the Board's config."""
    return spec if isinstance(spec, BatchSpec) else load_batch(spec, board.config)


def check_policies(board: Hosts, spec: BatchSpec) -> None:
    """Every job against its target's queue policy and defaults, before anything is recorded.

    Runs on this machine only (no connection); the first refusal is one ConfigError
    naming the fleet file, the job and the scheduler's would-be message. Provider
    targets have no queues and are checked when they are dispatched.
    """
    for job in spec.jobs:
        handle = board.on(job.target)
        if handle.config.kind == "provider":
            continue
        try:
            bridge_of(handle).prepare(**job_spec(job, "check"))
        except UserError as exc:
            raise ConfigError(f"job {job.name!r} would be refused by {job.target}: {exc}",
                              file=str(spec.path), key=f"jobs[{job.position}]",
                              valid="a walltime, mem_gb and queue the target's "
                                    "[hosts.X.queues] allow") from None


def job_spec(job: BatchJob, batch_id: str) -> dict[str, Any]:
    """JobSpec fields of a fleet job (what ``Bridge.prepare`` and ``jobs.submit`` take)."""
    env = {**job.env, BATCH_ENV: batch_id, BATCH_JOB_ENV: job.name}
    asked = {"command": job.command, "name": job.name, "walltime": job.walltime,
             "mem_gb": job.mem_gb, "cpus": job.cpus, "gpus": job.gpus, "queue": job.queue,
             "env": env}
    return {k: v for k, v in asked.items() if v is not None}


def start(board: Hosts, spec: BatchSpec | str | Path) -> str:
    """Check the batch spec and record a new batch (nothing is dispatched yet); its id."""
    found = _spec(board, spec)
    if found.study is not None:
        raise ConfigError("this file declares a [study]: its jobs get run ids and a ledger "
                          "through `mainboard study run` (or `mainboard batch run`)",
                          file=str(found.path), key="study",
                          valid="mainboard.study.run.run_study, or no [study] table")
    check_policies(board, found)
    batch_id = new_uid(found.name)
    store_of(board).receipts(batch_id).append(BatchCreated(
        batch_id=batch_id, name=found.name, fleet=str(found.path), fleet_sha256=found.sha256,
        jobs=[_recordable(j).model_dump(mode="json") for j in found.jobs]))
    return batch_id


def _recordable(job: BatchJob) -> BatchJob:
    """The job as its receipt may hold it: secret-looking env values redacted and named."""
    shown = redact_env(job.env)
    hidden = [k for k in job.env if shown[k] != job.env[k]]
    return job.model_copy(update={"env": shown, "secret_env": hidden}) if hidden else job


def _with_secrets(board: Hosts, view: BatchView, jobs: list[BatchJob]
                  ) -> tuple[list[BatchJob], dict[str, str]]:
    """``jobs`` with their real env values, read back from the fleet file they came from
    (receipts never hold them); the names of jobs that cannot have them, with why."""
    if not any(j.secret_env for j in jobs):
        return jobs, {}
    created = view.created
    spec: BatchSpec | None = None
    why = ""
    try:
        spec = load_batch(created.fleet, board.config)
        if spec.sha256 != created.fleet_sha256:
            why = f"{created.fleet} changed since batch {view.id} was created"
    except MainboardError as exc:
        why = _reason(exc)
    ready: list[BatchJob] = []
    refused: dict[str, str] = {}
    for job in jobs:
        if not job.secret_env:
            ready.append(job)
        elif spec is None or why:
            refused[job.name] = (f"its secret env values ({', '.join(job.secret_env)}) are "
                                 f"never recorded and cannot be read back: {why}; run the "
                                 "fleet as a new batch")
        else:
            ready.append(job.model_copy(update={"env": spec.job(job.name).env}))
    return ready, refused


def _submitted_for(board: Hosts, batch_id: str) -> dict[str, str]:
    """Jobs already submitted for this batch (by name), found through their env tags."""
    views, _errors = job_store(board).scan()
    found: dict[str, str] = {}
    for view in views:
        env = view.submitted.spec.get("env") or {}
        if env.get(BATCH_ENV) == batch_id and isinstance(env.get(BATCH_JOB_ENV), str):
            found.setdefault(env[BATCH_JOB_ENV], view.id)
    return found


def failure_outcome(exc: BaseException) -> str:
    """``unreachable`` (no answer), ``refused`` (policy, bad input) or ``error`` (the rest)."""
    if isinstance(exc, HostUnreachable):
        return "unreachable"
    if isinstance(exc, UserError):
        return "refused"
    return "error"


def _reason(exc: BaseException) -> str:
    """The first line of an error, for a receipt and a one-line report."""
    return first_line(exc, 500)


class _Dispatcher:
    """One dispatch of a batch's pending jobs: targets in parallel, events serialised."""

    def __init__(self, board: Hosts, batch_id: str, on_event: Event | None) -> None:
        self.board, self.batch_id = board, batch_id
        self.receipts = store_of(board).receipts(batch_id)
        self._on_event = on_event
        self._lock = threading.Lock()
        self.written: list[Payload] = []

    def record(self, payload: Payload) -> None:
        self.receipts.append(payload)
        with self._lock:
            self.written.append(payload)
            if self._on_event is not None:
                self._on_event(payload)

    def fail(self, job: BatchJob, outcome: str, reason: str) -> None:
        self.record(BatchDispatchFailed(batch_id=self.batch_id, name=job.name, target=job.target,
                                        outcome=outcome, reason=reason))

    def target(self, target: str, jobs: list[BatchJob]) -> None:
        """Prepare ``target``'s environment (pins, deps) and mirror the workspace to it once,
        then submit its jobs in fleet order; all under a lease on a provider target's job
        rental (preparing the environment chooses it, long before the first job is recorded)."""
        handle = self.board.on(target)
        with rental_lease(handle):
            self._send(handle, target, jobs)

    def _send(self, handle: Host, target: str, jobs: list[BatchJob]) -> None:
        down: tuple[str, str] | None = None
        environment: JobEnvironment | None = None
        synced = handle.config.kind != "provider"  # a rental is mirrored by its submit
        try:  # first: a host missing a [deps] pin gets nothing, not even the mirror
            if declared(self.board.config):
                environment = prepare_environment(handle, bridge_of(handle))
        except (MainboardError, OSError) as exc:
            down = (failure_outcome(exc), _reason(exc))
        if synced and down is None:
            try:
                Mirror.of(handle).sync()
            except (MainboardError, OSError) as exc:
                down = (failure_outcome(exc), f"mirroring the workspace failed: {_reason(exc)}")
        for job in jobs:
            if down is not None:
                self.fail(job, *down)
                continue
            try:
                spec = job_spec(job, self.batch_id)
                command = spec.pop("command")
                submitted = submit(self.board, target, command, data=job.data, fetch=job.fetch,
                                   sync=not synced, environment=environment, **spec)
            except (MainboardError, OSError) as exc:
                outcome = failure_outcome(exc)
                self.fail(job, outcome, _reason(exc))
                if isinstance(exc, HostError):  # the host is gone: do not knock once per job
                    down = (outcome, f"{target} failed on an earlier job: {_reason(exc)}")
                continue
            self.record(BatchDispatched(batch_id=self.batch_id, name=job.name, target=target,
                                        job=submitted.id))


def dispatch(board: Hosts, batch_id: str, *, wait: float | None = None,
             on_event: Event | None = None) -> list[Payload]:
    """Send every job of the batch not yet dispatched; the lines written (in order written).

    One dispatcher per batch at a time (a lock; ``wait`` seconds, None = block): a
    ``watch`` started while ``run`` is still dispatching leaves the work to it. Jobs an
    interrupted dispatch already submitted are adopted, not sent again.
    """
    store = store_of(board)
    batch_id = store.resolve(batch_id)
    with store.locked(batch_id, "dispatch", wait) as held:
        if not held:
            return []
        view = store.load(batch_id)
        pending = view.undispatched
        if not pending:
            return []
        worker = _Dispatcher(board, batch_id, on_event)
        adopted = _submitted_for(board, batch_id)
        fresh, refused = _with_secrets(board, view, [j for j in pending if j.name not in adopted])
        for job in pending:
            if job.name in adopted:
                worker.record(BatchDispatched(batch_id=batch_id, name=job.name,
                                              target=job.target, job=adopted[job.name],
                                              adopted=True))
            elif job.name in refused:
                worker.fail(job, "refused", refused[job.name])
        by_target: dict[str, list[BatchJob]] = {}
        for job in fresh:
            by_target.setdefault(job.target, []).append(job)
        if by_target:
            with ThreadPoolExecutor(max_workers=min(8, len(by_target))) as pool:
                for future in [pool.submit(worker.target, t, jobs)
                               for t, jobs in by_target.items()]:
                    future.result()
        return worker.written


def run(board: Hosts, spec: BatchSpec | str | Path, *,
        on_event: Event | None = None) -> BatchView:
    """``start`` then ``dispatch``: the batch as its receipts say once every job was sent."""
    batch_id = start(board, spec)
    dispatch(board, batch_id, on_event=on_event)
    return store_of(board).load(batch_id)
