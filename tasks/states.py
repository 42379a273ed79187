"""The run state a snapshot describes, built where the coordinator runs.

Why its own module: the runner (a whole run) and the task list (one state per task) both
start states from snapshots, and the task list sits below the runner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mainboard.integrators.driver import RunState
from mainboard.integrators.spec import RunSpec
from mainboard.integrators.stages import build_run
from mainboard.integrators.stop import stop_reason
from mainboard.tasks import modules
from mainboard.tasks.paths import remembered


def restore_state(spec: RunSpec, snapshot: Mapping[str, Any] | None, *, fresh_stop: bool
                  ) -> RunState:
    """The run state a snapshot describes (the initial state for None); workspace modules
    edited since an earlier run in this process are imported afresh (tasks.modules)."""
    with modules.fresh(spec.model_dump(mode="json"), remembered()):
        built = build_run(spec)
    if snapshot is None:
        return RunState.start(built)
    state = RunState.restore(built, {**snapshot, "run_id": spec.run_id()})
    if fresh_stop:  # a clone may have new stop conditions: judge them anew
        state.stop = stop_reason(spec.stop, samples=state.samples, iterations=state.iteration,
                                 result=state.accumulator.result(), kind=built.kind)
    return state


__all__ = ["restore_state"]
