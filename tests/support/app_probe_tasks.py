"""Tiny tasks for tests/tasks/test_app.py, loaded by a real worker with ``-I tests.support.app_probe_tasks``.

They exercise the wire (codec both ways, result backend), not numerics: the real
integration tasks live in ``mainboard.tasks``.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
from celery import shared_task


@shared_task(name="probe.echo")
def echo(value: Any) -> Any:
    """Return the argument unchanged: the whole round trip is the codec's."""
    return value


@shared_task(name="probe.scale")
def scale(x: np.ndarray, factor: float) -> dict[str, Any]:
    """Numpy in, numpy out, with the facts the test checks about what arrived."""
    return {
        "y": x * factor,
        "sum": x.sum(),
        "dtype": x.dtype.str,
        "shape": list(x.shape),
        "writeable": bool(x.flags.writeable),
        "contiguous": bool(x.flags.c_contiguous),
    }


@shared_task(name="probe.gated")
def gated(started: str, gate: str, budget: float = 120.0) -> str:
    """Say it started (a file), then hold until the file ``gate`` exists: a task in hand for
    as long as a test wants (an event, not a delay; the budget bounds a test that never
    opens it)."""
    import os
    import time

    open(started, "w").close()
    deadline = time.monotonic() + budget
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {gate} never opened")
        time.sleep(0.01)
    return "done"


@shared_task(name="probe.gc")
def gc_state() -> dict[str, Any]:
    """The garbage collector as the process running tasks has it (test_tasks_workers.py)."""
    return {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
