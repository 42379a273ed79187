"""Child runs of one parent, driven side by side on one session.

Why threads on one session and not one ``mainboard integrate`` per child: the broker, the
Celery app, the workers (and the fleet sync) are set up once for the whole parent, and
each child is still an ordinary run: its own content-derived id (the parent's id and the
child's label), its own coordinator, its own lease (so a killed parent's children are
taken over at once on this host), its own receipts naming the parent and point. Each
child's state is built in the calling thread (workspace modules are imported there);
only the coordinator loop runs in a worker thread.

A child whose receipts say it finished with the budget asked for is not run again (a
resumed parent skips it); one interrupted mid-run continues from its last snapshot; a
campaign child given more samples continues from its snapshot as a new execution.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from mainboard import keys
from mainboard.errors import BrokerError, first_line
from mainboard.integrators.plain import to_plain
from mainboard.integrators.spec import RunSpec
from mainboard.receipts import ChildDone, ChildStarted, RunCreated, RunResumed
from mainboard.runs.store import RunHistory
from mainboard.tasks.lease import Lease
from mainboard.tasks.outage import BROKER_ERRORS
from mainboard.tasks.runner import Session, restore_state
from mainboard.tasks.tasklist import TaskList

log = logging.getLogger(__name__)
LEASE_REFRESH_S = 2.0
ROW_KEYS = ("estimate", "error", "chi2_dof", "samples", "iterations", "wall_s", "stop_reason")


def child_id(parent_id: str, label: str) -> str:
    """A child's run id: its parent's (content-derived) id and its label."""
    return hashlib.sha256(f"{parent_id}:child:{label}".encode()).hexdigest()[:16]


@dataclass
class Child:
    """One child run to drive: ``spec`` is already validated (a point applied)."""

    label: str
    point: dict[str, Any]
    spec: RunSpec
    budget: int | None = None  # the sample budget (recorded; a campaign raises it)


@dataclass
class Outcome:
    """How a child ended: a result row, or the error that failed it."""

    child: Child
    run_id: str
    status: str  # finished | failed | paused | stopped (the last two: the user's doing)
    row: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    reused: bool = False  # finished before (a resumed parent): not run again


def row_of(result: dict[str, Any]) -> dict[str, Any]:
    """The result columns a parent's table keeps."""
    return {k: result.get(k) for k in ROW_KEYS}


class Children:
    """Runs a parent's children, at most ``limit`` at once, on one session."""

    def __init__(self, s: Session, parent_id: str, limit: int,
                 report: Callable[[Outcome], None] | None = None,
                 prior: list[ChildDone] | None = None) -> None:
        self.s, self.parent_id, self.limit = s, parent_id, limit
        self.report = report
        # what the parent's receipts say ended already (a resumed parent): never run again
        self.prior = {(d.label, d.budget): d for d in prior or []}
        self.pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="child")
        self.active: dict[Future[Outcome], Child] = {}

    def __enter__(self) -> Children:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None:  # Ctrl-C, a lost broker: children pause at a batch boundary
            for child in self.active.values():  # (`runs resume PARENT` continues them)
                with suppress(*BROKER_ERRORS):
                    self.s.r.hset(keys.run_state(child_id(self.parent_id, child.label)),
                                  "control", "pause")
        self.pool.shutdown(wait=True, cancel_futures=True)

    @property
    def free(self) -> int:
        """How many more children may start now."""
        return self.limit - len(self.active)

    def start(self, child: Child) -> Outcome | None:
        """Start ``child`` (or find it finished: its outcome at once, nothing run)."""
        run_id = child_id(self.parent_id, child.label)
        known = self.prior.get((child.label, child.budget))
        if known is not None:
            return self._done(Outcome(child, run_id, known.status, dict(known.result),
                                      known.error, reused=True), record=False)
        history = self.s.store.history(run_id)
        spec_json = child.spec.model_dump(mode="json")
        if history is not None and history.status == "finished" and \
                history.created.spec == spec_json and history.finished is not None:
            return self._done(Outcome(child, run_id, "finished",
                                      row_of(history.result or {}), reused=True))
        self.s.store.record(ChildStarted(run_id=self.parent_id, child=run_id,
                                         label=child.label, point=child.point,
                                         budget=child.budget))
        try:
            go, wall = self._prepare(child, run_id, history, spec_json)
        except Exception as exc:  # noqa: BLE001 - a child that cannot start fails alone
            if isinstance(exc, BrokerError):
                raise
            return self._done(Outcome(child, run_id, "failed", error=first_line(str(exc))))
        future = self.pool.submit(self._run, child, run_id, go)
        self.active[future] = child
        return None

    def _prepare(self, child: Child, run_id: str, history: RunHistory | None,
                 spec_json: dict[str, Any]) -> tuple[Callable[[], dict[str, Any]], float]:
        """The coordinator call for this child: fresh, resumed, or extended from a snapshot."""
        created = dict(run_id=run_id, name=child.spec.name, spec=spec_json,
                       parent=self.parent_id, point=child.point)
        if history is not None and history.status in ("unfinished", "paused") and \
                history.created.spec == spec_json:  # interrupted: continue where it was
            done, snapshot = history.last_snapshot
            state = restore_state(child.spec, snapshot, fresh_stop=False)
            wall = (history.iterations[-1].wall_s or 0.0) if history.iterations else 0.0
            self.s.store.record(RunResumed(run_id=run_id, from_iteration=done))
            fresh = False
        elif history is not None and history.status == "finished" and \
                history.finished is not None:  # more samples (a campaign): from its snapshot
            done, snapshot = history.last_snapshot
            state = restore_state(child.spec, snapshot, fresh_stop=True)
            wall = float(history.finished.result.get("wall_s") or 0.0)
            self.s.store.record(RunCreated(**created, from_iteration=done, snapshot=snapshot))
            fresh = True
        else:
            state = restore_state(child.spec, None, fresh_stop=False)
            wall = 0.0
            self.s.store.record(RunCreated(**created))
            fresh = True
        if child.spec.tasks:  # a scan point's own timeline: its tasks in order
            lease = Lease(self.s.r, run_id)
            timeline = TaskList(self.s, run_id, child.spec, None if fresh else history, None,
                                lease=lease)
            return (lambda: _released(lease, lambda: to_plain(timeline.run().to_dict()))), wall
        coordinator = self.s.coordinator(state, None, wall, run_id=run_id)
        return (lambda: to_plain(coordinator.run(fresh=fresh).to_dict())), wall

    def _run(self, child: Child, run_id: str, go: Callable[[], dict[str, Any]]) -> Outcome:
        began = time.perf_counter()
        try:
            result = go()
        except BrokerError:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded with its error; siblings go on
            log.warning("child %s (%s) failed: %s", child.label, run_id, exc)
            return Outcome(child, run_id, "failed", error=first_line(str(exc)))
        if result.get("stop_reason") in ("pause", "paused"):  # the user's: not a failure
            return Outcome(child, run_id, "paused", row_of(result),
                           error=f"paused by `mainboard runs pause`; `mainboard runs resume "
                                 f"{self.parent_id}` continues it")
        if result.get("stop_reason") in ("stop", "stopped"):
            return Outcome(child, run_id, "stopped", row_of(result),
                           error="stopped by `mainboard runs stop` (its partial result)")
        log.debug("child %s done in %.2f s", child.label, time.perf_counter() - began)
        return Outcome(child, run_id, "finished", row_of(result))

    def _done(self, outcome: Outcome, record: bool = True) -> Outcome:
        if record:
            self.s.store.record(ChildDone(run_id=self.parent_id, child=outcome.run_id,
                                          label=outcome.child.label, point=outcome.child.point,
                                          status=outcome.status, result=outcome.row,
                                          error=outcome.error, budget=outcome.child.budget))
        if self.report is not None:
            self.report(outcome)
        return outcome

    def wait(self) -> list[Outcome]:
        """Block until at least one running child ends; the outcomes of those that did."""
        if not self.active:
            return []
        finished: set[Future[Outcome]] = set()
        while not finished:  # the parent's own lease lives as long as its children run
            self.s.lease.refresh()
            finished, _ = wait(list(self.active), timeout=LEASE_REFRESH_S,
                               return_when=FIRST_COMPLETED)
        out = []
        for future in finished:
            self.active.pop(future)
            out.append(self._done(future.result()))  # a BrokerError ends the parent here
        return out


def _released(lease: Lease, go: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``go()``, then the child's lease given back (a task list keeps it between tasks)."""
    try:
        return go()
    finally:
        with suppress(*BROKER_ERRORS):
            lease.release()


def run_all(s: Session, parent_id: str, children: list[Child], limit: int,
            report: Callable[[Outcome], None] | None = None,
            prior: list[ChildDone] | None = None) -> list[Outcome]:
    """Every child, ``limit`` at a time; outcomes in the order of ``children``."""
    done: dict[str, Outcome] = {}
    with Children(s, parent_id, limit, report, prior) as pool:
        queue = list(children)
        while queue or pool.active:
            while queue and pool.free > 0:
                found = pool.start(queue.pop(0))
                if found is not None:
                    done[found.child.label] = found
            for outcome in pool.wait():
                done[outcome.child.label] = outcome
    return [done[c.label] for c in children]


__all__ = ["Child", "Children", "Outcome", "child_id", "row_of", "run_all"]
