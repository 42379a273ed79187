"""cProfile inside a Celery worker's processes, for bench/profile_worker.py only.

On PYTHONPATH with ``MAINBOARD_PROFILE_DIR`` set, every Python process started profiles
itself on CPU time: the prefork parent from its start (dumped at exit), and each pool child
from its fork (the parent's profile dropped; dumped after each task, so a child killed at
shutdown leaves its stats too). Files: ``<dir>/<role>-<pid>.prof``. Touching
``<dir>/reset`` starts each profile afresh at its next task (the warm-up left out).
"""

from __future__ import annotations

import atexit
import cProfile
import os
import time

_DIR = os.environ.get("MAINBOARD_PROFILE_DIR")
_STATE: dict[str, cProfile.Profile] = {}


def _path(role: str) -> str:
    return os.path.join(_DIR or ".", f"{role}-{os.getpid()}.prof")


def _start(role: str) -> None:
    prof = cProfile.Profile(time.process_time)
    _STATE["prof"], _STATE["role"] = prof, role  # type: ignore[assignment]
    prof.enable()


def _dump() -> None:
    prof = _STATE.get("prof")
    if prof is None:
        return
    prof.disable()
    prof.dump_stats(_path(str(_STATE["role"])))
    prof.enable()


def _maybe_reset(**_: object) -> None:
    """A fresh profile when ``<dir>/reset`` changed since this process last looked."""
    try:
        stamp = os.stat(os.path.join(_DIR or ".", "reset")).st_mtime_ns
    except FileNotFoundError:
        return
    if _STATE.get("stamp") != stamp:
        _STATE["stamp"] = stamp  # type: ignore[assignment]
        _STATE["prof"].disable()
        _start(str(_STATE["role"]))


def _child() -> None:
    old = _STATE.get("prof")
    if old is not None:
        old.disable()
    _start("child")
    from celery.signals import task_postrun, task_prerun  # lazy: only in a profiled child

    task_prerun.connect(_maybe_reset, weak=False)
    task_postrun.connect(lambda **_: _dump(), weak=False)


def _parent_hooks() -> None:
    from celery.signals import task_received  # lazy: only in a profiled worker

    task_received.connect(_maybe_reset, weak=False)


if _DIR:
    _start("parent")
    atexit.register(_dump)
    os.register_at_fork(after_in_child=_child)
    try:
        _parent_hooks()
    except ImportError:  # not a Celery process
        pass
