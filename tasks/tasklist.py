"""A run's ``[[tasks]]`` driven in order under the run's one lease, each with its own result.

Why one coordinator per task, not one for the run: a task changes the run's tables
(sampler, transforms, accumulator, stop, batching), so each sample task is a run of its
own over the same id and seed: a fresh accumulator and sample count (its own estimate),
the sampler as the task it starts from left it (``frozen``: never adapted), and iteration
numbers that go on across tasks, so every batch of the run draws from its own seed and
workers tell definitions apart (:func:`~mainboard.tasks.context.load_iteration`).

Receipts are the truth: ``run.task_started`` and ``run.task_done`` (the task's samples,
estimate, error, values and the state it left, which ``from = NAME`` restores), so a
resumed run skips done tasks and continues a started one from its last iteration.
``pause`` records the run paused; ``runs resume`` goes on with the next task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import replace
from typing import Any, Protocol

import redis
from celery import Celery

from mainboard import keys
from mainboard.integrators.driver import RunResult, RunState
from mainboard.integrators.plain import to_plain
from mainboard.integrators.samplers import restore_sampler
from mainboard.integrators.spec import RunSpec, parse_run
from mainboard.integrators.spec_tasks import Step
from mainboard.receipts import RunFinished, RunPaused, TaskDone, TaskStarted
from mainboard.runs.store import RunHistory, RunStore, spec_of
from mainboard.runs.tasktable import done_tasks, steps_of
from mainboard.tasks.appends import Inbox
from mainboard.tasks.coordinator import Coordinator, Progress
from mainboard.tasks.lease import Lease
from mainboard.tasks.outage import BROKER_ERRORS
from mainboard.tasks.rasterrun import Raster
from mainboard.tasks.states import restore_state

HALTED = ("paused", "stopped")


class Driver(Protocol):
    """What the task list needs of a session (``tasks.runner.Session``)."""

    app: Celery
    store: RunStore
    r: redis.Redis
    lease: Lease
    places: dict[str, Any] | None
    inbox: Inbox | None

    def coordinator(self, state: RunState, progress: Callable[[Progress], None] | None,
                    wall_before: float = 0.0, run_id: str | None = None,
                    final: bool = True, lease: Lease | None = None) -> Coordinator:
        """The coordinator of the leased run (or of ``run_id`` under ``lease``)."""


def has_tasks(spec: RunSpec, history: RunHistory | None) -> bool:
    """Whether a run is driven by its task list (its own, or tasks appended to it)."""
    return bool(spec.tasks) or bool(history is not None and history.appended)


def _iterations(history: RunHistory | None) -> int:
    """Iterations the run has done so far, over every task (its next iteration's number)."""
    if history is None:
        return 0
    done = [i.iteration for i in history.iterations]
    done += [t.iteration for t in history.tasks]
    return max(done, default=0)


def _resumed_snapshot(history: RunHistory | None, name: str) -> Mapping[str, Any] | None:
    """The last iteration snapshot task ``name`` took (a started task resumes from it)."""
    if history is None:
        return None
    for item in reversed(history.iterations):
        if item.snapshot.get("task") == name:
            return item.snapshot
    return None


class TaskList:
    """One execution of a run's task list: from the first task not done to the end, a
    pause, a ``runs pause|stop`` or a failure (raised, as a plain run's)."""

    def __init__(self, s: Driver, run_id: str, spec: RunSpec, history: RunHistory | None,
                 progress: Callable[[Progress], None] | None, lease: Lease | None = None
                 ) -> None:
        self.s, self.run_id, self.spec, self.progress = s, run_id, spec, progress
        # a parent's child runs under a lease of its own, one for all its tasks
        self.lease = lease
        self.history = history
        self.base = spec.model_dump(mode="json", exclude={"tasks"})
        self.steps = steps_of(spec, history.appended if history is not None else [])
        self.done = done_tasks(history)
        self.iteration = _iterations(history)
        self.fresh = history is None
        self.wall = history.iterations[-1].wall_s or 0.0 if history and history.iterations \
            else 0.0
        self.last: RunResult | None = None
        # A run without tasks of its own ran one implicit sample task: appended tasks start
        # from the state it left.
        self.start = None if spec.tasks or history is None else history.last_snapshot[1]

    def run(self) -> RunResult:
        """Every task not done, in order; the run's result is its last sample task's."""
        started = {t.index for t in (self.history.tasks if self.history else ())
                   if isinstance(t, TaskStarted)}
        known = len(self.history.appended) if self.history else 0
        while True:
            for step in self.steps:
                if step.index in self.done:
                    continue
                resuming = step.index in started
                if not resuming:
                    self.s.store.record(TaskStarted(run_id=self.run_id, index=step.index,
                                                    name=step.name, kind=step.kind,
                                                    iteration=self.iteration))
                halted = self._one(step, resuming)
                if halted:
                    return halted
            # Before finishing: tasks `runs append` recorded meanwhile follow (the inbox's
            # lock makes an append either seen here or find the run ended).
            more = self.s.inbox.take(known) if self.s.inbox is not None else None
            if more is None:
                break
            self.history, known = more, len(more.appended)
            self.steps = steps_of(self.spec, more.appended)
        result = self.result()
        self.s.store.record(RunFinished(run_id=self.run_id, result=to_plain(result.to_dict())))
        self.s.r.hset(keys.run_state(self.run_id), "status", "finished")
        return result

    def result(self) -> RunResult:
        """The last sample task's result (this execution's, or a done one's)."""
        return self.last or answer(self.run_id, self.base, self.steps, self.done)

    def _one(self, step: Step, resuming: bool) -> RunResult | None:
        """Task ``step``; the result when the run halted in it (pause, stop)."""
        carried = self._origin(step)
        if step.kind == "sample":
            state, result = self._sample(step, resuming)
            if result.stop_reason in HALTED:
                return result
            self._done(step, state.samples, result, state.snapshot())
            return None
        values = self._raster(step) if step.kind in ("plot_line", "image") else None
        self._done(step, 0, None, carried, values)
        if step.kind == "pause":
            self.s.store.record(RunPaused(run_id=self.run_id, iteration=self.iteration))
            self.s.r.hset(keys.run_state(self.run_id), "status", "paused")
            return replace(self.result(), stop_reason="paused")
        return None

    def _origin(self, step: Step) -> Mapping[str, Any] | None:
        """The state the task starts from: what its parent task left (None: the start)."""
        if step.parent is None:
            return self.start
        parent = self.done.get(step.parent)
        return None if parent is None else parent.snapshot

    def _parent_sampler(self, step: Step) -> Any:
        """The sampler table in effect where the task starts."""
        if step.parent is None:
            return self.base.get("sampler")
        return self.steps[step.parent].settings.get("sampler")

    def _state(self, step: Step, resuming: bool) -> RunState:
        """A sample task's state: its own last snapshot when resumed, else a fresh
        accumulator and sample count over the sampler its parent left (same settings)."""
        spec = parse_run(step.run_data(self.base), file=f"<task {step.name}>")
        snapshot = _resumed_snapshot(self.history, step.name) if resuming else None
        if snapshot is not None:
            return restore_state(spec, snapshot, fresh_stop=False)
        state = restore_state(spec, None, fresh_stop=False)
        origin = self._origin(step)
        if origin is not None and self._parent_sampler(step) == step.settings.get("sampler"):
            state.sampler = restore_sampler(origin["sampler"], state.run.domain)
        state.iteration, state.task = self.iteration, step.name
        state.frozen = bool(step.settings.get("frozen"))
        return state

    def _sample(self, step: Step, resuming: bool) -> tuple[RunState, RunResult]:
        state = self._state(step, resuming)
        coordinator = self.s.coordinator(state, self.progress, self.wall, final=False,
                                         run_id=self.run_id if self.lease else None,
                                         lease=self.lease)
        result = coordinator.run(fresh=self.fresh)
        self.fresh = False
        self.iteration = state.iteration
        result = replace(result, run_id=self.run_id)
        if result.stop_reason not in HALTED:
            self.last = result
        return state, result

    def _raster(self, step: Step) -> dict[str, Any]:
        """A plot_line or image evaluated on the fleet as one iteration number of the run."""
        spec = parse_run(step.run_data(self.base), file=f"<task {step.name}>")
        state = restore_state(spec, None, fresh_stop=False)
        raster = Raster(self.s.app, self.s.r, self.lease or self.s.lease, self.run_id,
                        self.s.places)
        values = raster.run(spec, state.sampler.snapshot(), step.kind,
                            step.task.geometry.model_dump(mode="json"), self.iteration,
                            spec.accumulator_kind)
        self.iteration += 1
        return values

    def _done(self, step: Step, samples: int, result: RunResult | None,
              snapshot: Mapping[str, Any] | None,
              values: dict[str, Any] | None = None) -> None:
        plain = to_plain(result.to_dict()) if result is not None else None
        done = TaskDone(run_id=self.run_id, index=step.index, name=step.name, kind=step.kind,
                        iteration=self.iteration, samples=samples,
                        estimate=plain["estimate"] if plain else None,
                        error=plain["error"] if plain else None, result=plain,
                        snapshot=to_plain(snapshot) if snapshot is not None else None,
                        values=values)
        self.s.store.record(done)
        self.done[step.index] = done


def _sampling(spec: RunSpec, history: RunHistory | None) -> bool:
    """A run without tasks of its own whose implicit sample task has not ended (tasks
    appended to it wait for it)."""
    return not spec.tasks and not (history is not None and (
        history.sampled or any(isinstance(t, TaskStarted) for t in history.tasks)))


def drive(s: Driver, run_id: str, spec: RunSpec, history: RunHistory | None,
          progress: Callable[[Progress], None] | None, state: RunState | None = None,
          wall: float = 0.0, fresh: bool = False) -> RunResult:
    """Drive a run to its end, a pause or a failure, taking tasks ``runs append`` records
    meanwhile (the session's inbox open throughout). A run without tasks is one implicit
    sample task (``state``, resumed from ``history`` when None); appended tasks follow it."""
    inbox = s.inbox
    if inbox is not None:
        inbox.open()
    try:
        if not _sampling(spec, history):
            return TaskList(s, run_id, spec, history, progress).run()
        if state is None:
            assert history is not None
            state = restore_state(spec, history.last_snapshot[1], fresh_stop=False)
        coordinator = s.coordinator(state, progress, wall, final=inbox is None)
        result = coordinator.run(fresh=fresh)
        if inbox is None or result.stop_reason in HALTED:
            return result
        more = inbox.take(0)  # appended while it sampled (or before, while it was paused)
        if more is None:
            coordinator.finish(result)
            return result
        return TaskList(s, run_id, spec, more, progress).run()
    finally:
        if inbox is not None:  # a broker gone is the run's own error, not this one
            with suppress(*BROKER_ERRORS):
                inbox.close()


def answer(run_id: str, base: Mapping[str, Any], steps: list[Step],
           done: Mapping[int, TaskDone]) -> RunResult:
    """The last done sample task's result, rebuilt from the state it left (no work)."""
    for step in reversed(steps):
        task = done.get(step.index)
        if step.kind == "sample" and task is not None and task.snapshot is not None:
            state = restore_state(parse_run(step.run_data(base)), task.snapshot,
                                  fresh_stop=False)
            return replace(state.result(), run_id=run_id)
    raise ValueError(f"run {run_id} has no finished sample task yet")


def finished_result(history: RunHistory) -> RunResult:
    """The answer of a finished task run, rebuilt from its last sample task."""
    spec = parse_run(dict(spec_of(history)))
    return answer(history.run_id, spec.model_dump(mode="json", exclude={"tasks"}),
                  steps_of(spec, history.appended), done_tasks(history))


__all__ = ["Driver", "TaskList", "answer", "drive", "finished_result", "has_tasks"]
