"""``mainboard.integrate(run, workers=...)`` and the run verbs behind ``mainboard runs``.

:func:`integrate` is the one way into a run: ``mainboard integrate``, the Python API
``mainboard.integrate``, the Celery task ``mainboard.tasks.integrate`` and the parents'
tests all call it, with a run, a parent (scan, tune, campaign), a run-file dict or a path.
Each call sets the run's import roots, then opens a session: the broker (embedded, started
if needed, or the configured one), a Celery app, a Redis client, the fleet's hosts synced
(``FLEET_PREPARE``), and local batch workers when asked for (or when no fleet consumes the
batch queue). It then hands the run to the :class:`~mainboard.tasks.coordinator.Coordinator`
(a parent to its driver, ``PARENT_DRIVER``) and stops the workers it started.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import redis
from celery import Celery

from mainboard.bridges.envs import worker_python
from mainboard.config import Config, load_config
from mainboard.errors import UserError
from mainboard.integrators.driver import RunResult, RunState
from mainboard.integrators.runfile import load_run
from mainboard.integrators.spec import RunSpec, parse_run
from mainboard.integrators.spec_parents import ParentSpec, is_parent, parse_parent
from mainboard.integrators.spec_taskfile import load_task_file
from mainboard.names import release_gc, symbol_by_name
from mainboard.receipts import RunCreated, RunResumed, TasksAppended
from mainboard.redisclient import redis_client
from mainboard.runs.control import connect
from mainboard.runs.store import RunHistory, RunStore, clone_id, spec_of
from mainboard.runs.tasktable import steps_of
from mainboard.services.broker import EmbeddedBroker, check_broker, worker_url
from mainboard.tasks.app import make_app, resolve_url
from mainboard.tasks.appends import Appended, Inbox, offer
from mainboard.tasks.coordinator import Coordinator, Progress
from mainboard.tasks.goal import start_deadline
from mainboard.tasks.lease import Lease
from mainboard.tasks.outage import BROKER_ERRORS, where
from mainboard.tasks.paths import places, use_import_roots
from mainboard.tasks.preflight import preflight, uses_embedded
from mainboard.tasks.states import restore_state
from mainboard.tasks.tasklist import drive, finished_result, has_tasks
from mainboard.tasks.workers import (
    LocalWorkers,
    fleet_size,
    no_fleet,
    nobody_listens,
    require_fleet,
)

Result = RunResult
RunLike = RunSpec | ParentSpec | Mapping[str, Any] | str | Path
ProgressFn = Callable[[Progress], None]
Report = Callable[[Any], None]  # a parent's report of each child that ended (parents.context)

# The layers above, by name (``names.symbol_by_name``): the fleet and the parents build on this
# module, so it never imports them. The fleet's side of a run: the workspace synced to the
# hosts whose workers evaluate it (``prepare=None``: nothing). A parent's loop on a session.
FLEET_PREPARE = "mainboard.fleet.prepare:PREPARE"
PARENT_DRIVER = "mainboard.parents.driver:drive"


class Prepare(Protocol):
    """What the layer above (the fleet, ``mainboard.fleet.prepare.PREPARE``) does for a run
    once its lease is held; an object handed in, so ``tasks`` never imports the fleet."""

    def sync(self, config: Config) -> object:
        """Put the workspace where the run's batches will be evaluated, before any is sent
        (the hosts of live workers and of pools that start workers on demand)."""

    def standby(self, config: Config) -> str | None:
        """What starts workers on demand (an autoscaled pool at zero), in words; then
        ``workers=0`` waits for it instead of refusing the run. None: nothing does."""


def load_spec(run: RunLike) -> RunSpec | ParentSpec:
    """A validated run or parent from a model, a run-file dict or a RUN.toml path."""
    if isinstance(run, RunSpec | ParentSpec):
        return run
    if isinstance(run, str | Path):
        return load_run(run)
    if isinstance(run, Mapping):
        data = dict(run)
        if is_parent(data):
            return parse_parent(data, file="<parent dict>")
        return parse_run(data, file="<run dict>")
    raise UserError(f"a run is a RunSpec, a ParentSpec, a dict or a path to a RUN.toml, "
                    f"not {type(run).__name__}")


def _prepare(prepare: Prepare | str | None) -> Prepare | None:
    """The prepare step itself, where it is named (``FLEET_PREPARE``)."""
    return symbol_by_name(prepare) if isinstance(prepare, str) else prepare


def default_workers() -> int:
    """One local worker per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


@dataclass
class Session:
    """What one coordinator needs: app, Redis, the run receipts, workers it started, and
    the run's lease, held before anything of the run is written or started."""

    app: Celery
    r: redis.Redis
    store: RunStore
    workers: LocalWorkers | None
    lease: Lease
    broker: str  # host:port, for messages
    outage_s: float
    places: dict[str, Any] | None = None  # where the run's files are (tasks.paths.places)
    inbox: Inbox | None = None  # takes tasks `runs append` adds while the run is driven

    def coordinator(self, state: RunState, progress: ProgressFn | None,
                    wall_before: float = 0.0, run_id: str | None = None,
                    final: bool = True, lease: Lease | None = None) -> Coordinator:
        """The coordinator of the leased run over this session's broker and workers; with
        ``run_id``, of another run (a parent's child) under its own lease, taken when it
        starts, so children run side by side on one session."""
        if lease is None:
            lease = self.lease if run_id is None else Lease(self.r, run_id)
        return Coordinator(self.app, self.r, self.store, lease.run_id, state,
                           progress=progress, wall_before=wall_before,
                           health=self.workers.check if self.workers else None,
                           exited=self.workers.exited if self.workers else None,
                           lease=lease, broker=self.broker, outage_budget=self.outage_s,
                           places=self.places,
                           workers=self.workers.count if self.workers else 0, final=final)


def _embedded_idle(cfg: Config, broker_url: str | None) -> bool:
    """True when the run would use the embedded broker and it is not running."""
    return uses_embedded(cfg, broker_url) and not EmbeddedBroker(cfg.state_dir).status().running


@contextmanager
def session(run_id: str, config: Config | None = None, broker_url: str | None = None,
            workers: int | None = None, *, prepare: Prepare | str | None = FLEET_PREPARE,
            run_file: str | Path | None = None, appends: bool = False) -> Iterator[Session]:
    """Broker, app, the run's lease and workers for one run; all let go on the way out.

    The broker must answer first (BrokerError in one line naming its host:port and the
    fix). The lease comes next: a run a live coordinator drives is refused at once, before
    a receipt, a key or a worker exists. ``workers=None`` uses the fleet when one consumes
    the batch queue, else one local worker per core; ``workers=N`` starts N local workers;
    ``workers=0`` uses the fleet only: it never starts the embedded broker, and with no
    fleet worker answering within ``FLEET_WAIT_S`` it is refused (``no_fleet``).
    ``prepare.sync(config)`` runs once the lease is held, before any batch is sent: the fleet
    layer syncs the workspace to its hosts there (``run_file`` says where the run's own
    modules are, for the workers). Local workers known to be wanted (``workers=N``, or no
    client of the broker could answer a broadcast) start right after the lease, so they
    boot meanwhile; a finished run does not wait for them to exit. ``appends=True``: the
    run takes tasks ``runs append`` adds while it is driven (``tasks.appends``).
    """
    prepare = _prepare(prepare)
    if workers is not None and (type(workers) is not int or workers < 0):
        raise UserError(f"workers must be an integer >= 0 (0 = the running fleet only), "
                        f"got {workers!r}")
    cfg = config if config is not None else load_config()
    if workers == 0 and _embedded_idle(cfg, broker_url):
        raise no_fleet("the embedded broker is not running, so no fleet worker is either")
    url = resolve_url(cfg, broker_url)
    check_broker(url, cfg)
    r = redis_client(url, socket_timeout=30, socket_connect_timeout=10,
                     health_check_interval=25)
    lease = Lease(r, run_id)
    inbox = Inbox(r, RunStore(cfg.state_dir), lease) if appends else None
    local: LocalWorkers | None = None
    app: Celery | None = None
    finished = False
    try:
        if inbox is not None:
            inbox.acquire()
        else:
            lease.acquire()
        # Known without asking Celery (nobody could answer a broadcast): local workers
        # start now and boot while the app is built and the fleet (if any) is synced.
        count = workers if workers is not None else (
            default_workers() if nobody_listens(r) else None)
        if count:
            local = LocalWorkers(count, worker_url(url, cfg), cfg.state_dir / "workers",
                                 python=worker_python(cfg)).start()
        app = make_app(cfg, broker_url=url)
        if workers == 0:
            require_fleet(app, where(url), standby=None if prepare is None
                          else partial(prepare.standby, cfg), r=r)
        if prepare is not None:
            prepare.sync(cfg)
        if count is None:
            count = 0 if fleet_size(app, r=r) else default_workers()
            if count:
                local = LocalWorkers(count, worker_url(url, cfg), cfg.state_dir / "workers",
                                     python=worker_python(cfg)).start()
        release_gc()  # a held command's start is over: the run may go on for hours
        yield Session(app, r, RunStore(cfg.state_dir), local, lease, where(url),
                      float(cfg.broker.outage), places(run_file, cfg.root), inbox)
        finished = True
    finally:
        if local is not None:  # a finished run needs nothing they hold: not waited on
            local.stop(wait=not finished)
        with suppress(*BROKER_ERRORS):
            lease.release()
            if inbox is not None:
                inbox.shut()
        r.close()
        if app is not None:
            app.close()


def _finished_result(history: RunHistory) -> RunResult:
    """The answer of a finished run, rebuilt from its last snapshot (no work done)."""
    spec = parse_run(dict(spec_of(history)))
    if has_tasks(spec, history):
        return finished_result(history)
    state = restore_state(spec, history.last_snapshot[1], fresh_stop=False)
    return replace(state.result(), run_id=history.run_id)


def _resume(s: Session, history: RunHistory, progress: ProgressFn | None) -> RunResult:
    if history.status == "finished":
        return _finished_result(history)
    spec = parse_run(dict(spec_of(history)))
    done, snapshot = history.last_snapshot
    state = None if has_tasks(spec, history) else \
        restore_state(spec, snapshot, fresh_stop=False)
    s.store.record(RunResumed(run_id=history.run_id, from_iteration=done))
    wall = history.iterations[-1].wall_s if history.iterations else None
    return drive(s, history.run_id, spec, history, progress, state, wall or 0.0)


def integrate(run: RunLike, workers: int | None = None, *, config: Config | None = None,
              broker_url: str | None = None, progress: ProgressFn | None = None,
              resume: bool = False, prepare: Prepare | str | None = FLEET_PREPARE,
              run_file: str | Path | None = None, report: Report | None = None
              ) -> RunResult | dict[str, Any]:
    """Integrate ``run`` on workers; ``resume=True`` continues an earlier execution of it.

    A parent (scan, tune, campaign) runs its children and gives its table
    (``parents.table.view``), ``report`` called as each child ends; one that finished before
    is only shown, one that was interrupted continues. ``run_file`` names the RUN.toml a
    spec came from (its folder is an import root); ``prepare`` see :func:`session`.
    """
    run_file = run if isinstance(run, str | Path) else run_file
    cfg = config if config is not None else load_config()
    use_import_roots(run_file, cfg.root)  # a module next to the run file, or in the workspace
    spec = load_spec(run)
    if isinstance(spec, ParentSpec):
        with session(spec.run_id(), cfg, broker_url, workers, prepare=prepare,
                     run_file=run_file) as s:
            history = s.store.history(spec.run_id())
            drive_parent = symbol_by_name(PARENT_DRIVER)
            return drive_parent(s, spec, history, report, str(run_file or spec.name))
    run_id = spec.run_id()
    deadline = preflight(spec, run_file, cfg)  # refused while nothing of the run exists
    fresh = None if resume else restore_state(spec, None, fresh_stop=False)
    with session(run_id, cfg, broker_url, workers, prepare=prepare,
                 run_file=run_file, appends=True) as s:
        history = s.store.history(run_id) if resume else None
        if history is not None:
            return _resume(s, history, progress)
        state = fresh or restore_state(spec, None, fresh_stop=False)
        s.store.record(RunCreated(run_id=run_id, name=spec.name,
                                  spec=spec.model_dump(mode="json"), deadline=deadline))
        return drive(s, run_id, spec, None, progress, state, fresh=True)


def resume(what: str, workers: int | None = None, *, config: Config | None = None,
           broker_url: str | None = None, progress: ProgressFn | None = None,
           prepare: Prepare | str | None = FLEET_PREPARE) -> RunResult:
    """Continue run ``what`` (id, id prefix or name) from its last snapshot."""
    cfg = config if config is not None else load_config()
    use_import_roots(workspace=cfg.root)  # the run's python modules, found as at first
    history = RunStore(cfg.state_dir).find(what)
    if history.status == "finished":
        return _finished_result(history)
    with session(history.run_id, cfg, broker_url, workers, prepare=prepare,
                 appends=True) as s:
        # Re-read under the lease: a coordinator that held it a moment ago may have
        # finished the run or written more iterations since.
        current = s.store.history(history.run_id) or history
        return _resume(s, current, progress)


def append(what: str, path: str | Path, workers: int | None = None, *,
           config: Config | None = None, broker_url: str | None = None,
           progress: ProgressFn | None = None, prepare: Prepare | str | None = FLEET_PREPARE
           ) -> RunResult | Appended:
    """Add the tasks of ``path`` to run ``what``: the coordinator driving it takes them
    before it would finish (``Appended(live=True)``); a finished run goes on with them now
    (the result of its last sample task); a paused or interrupted one gets them for its
    resume (``Appended(live=False)``). A run driven by a coordinator that cannot take them
    is refused (``tasks.appends.offer``); the file is checked first, nothing stored."""
    cfg = config if config is not None else load_config()
    use_import_roots(workspace=cfg.root)
    store = RunStore(cfg.state_dir)
    history = store.find(what)
    if history.created.kind is not None:
        raise UserError(f"run {history.run_id} is a {history.created.kind}: tasks go on "
                        "plain runs")
    spec = parse_run(dict(spec_of(history)))
    load_task_file(path, spec, steps_of(spec, history.appended))  # bad input: nothing done
    run_id = history.run_id
    r = connect(cfg)
    if r is not None:
        try:
            taken = offer(r, store, run_id, partial(_record_append, store, spec, path))
            if taken is not None:
                return taken
            history = store.history(run_id) or history  # it may have ended meanwhile
            if history.status != "finished":
                lease = Lease(r, run_id)
                lease.acquire()  # a coordinator that started meanwhile: refused
                try:
                    return Appended(run_id, _record_append(store, spec, path, history), False)
                finally:
                    lease.release()
        finally:
            r.close()
    elif history.status != "finished":  # no broker running: no coordinator either
        return Appended(run_id, _record_append(store, spec, path, history), False)
    with session(run_id, cfg, broker_url, workers, prepare=prepare, appends=True) as s:
        _record_append(s.store, spec, path, s.store.history(run_id) or history)
        return _resume(s, s.store.history(run_id) or history, progress)


def _record_append(store: RunStore, spec: RunSpec, path: str | Path,
                   history: RunHistory) -> int:
    """Check the tasks against the run as it is now (its lease or append lock held),
    record them; how many."""
    tasks = load_task_file(path, spec, steps_of(spec, history.appended))
    store.record(TasksAppended(run_id=history.run_id, tasks=tasks))
    return len(tasks)


def clone(what: str, from_iteration: int, workers: int | None = None, *,
          max_samples: int | None = None, max_iterations: int | None = None,
          config: Config | None = None, broker_url: str | None = None,
          progress: ProgressFn | None = None, prepare: Prepare | str | None = FLEET_PREPARE
          ) -> RunResult:
    """Branch a new run (new id) from run ``what``'s snapshot after ``from_iteration``."""
    cfg = config if config is not None else load_config()
    use_import_roots(workspace=cfg.root)  # the run's python modules, found as at first
    parent = RunStore(cfg.state_dir).find(what)
    snapshot = parent.snapshot_after(from_iteration)
    data = dict(spec_of(parent))
    overrides = {k: v for k, v in (("max_samples", max_samples),
                                   ("max_iterations", max_iterations)) if v is not None}
    if overrides:
        data["stop"] = {**data["stop"], **overrides}
    spec = parse_run(data, file=f"<clone of {parent.run_id}>")
    run_id = clone_id(spec.run_id(), parent.run_id, from_iteration)
    state = restore_state(spec, snapshot, fresh_stop=True)
    deadline = start_deadline(spec, f"<clone of {parent.run_id}>")
    with session(run_id, cfg, broker_url, workers, prepare=prepare) as s:
        s.store.record(RunCreated(run_id=run_id, name=spec.name,
                                  spec=spec.model_dump(mode="json"), parent=parent.run_id,
                                  from_iteration=from_iteration, snapshot=snapshot,
                                  deadline=deadline))
        return s.coordinator(state, progress).run(fresh=True)


__all__ = ["FLEET_PREPARE", "PARENT_DRIVER", "Appended", "Result", "append", "clone",
           "default_workers", "integrate", "load_spec", "restore_state", "resume", "session"]
