"""What `mainboard up` supervises, one :class:`Child` per process, all with one interface.

The supervisor (:mod:`.up`) asks each child whether it still runs, why it ended, to
start (again) and to stop; how each does so stays here. The broker and Flower are the
workspace's daemons (:class:`mainboard.daemon.Daemon`): started by their own ``up`` and
told alive by their verified pid. The dashboard is a ``mainboard dashboard`` subprocess
(only the CLI may import the dashboard) reading its token from a 0600 file, so a
restarted one keeps the printed URL. Workers are ``tasks.workers.LocalWorkers`` slots,
relaunched under their node name.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mainboard.daemon import Daemon, die_with_parent, exit_reason, log_tail
from mainboard.errors import SupervisorError
from mainboard.tasks.workers import LocalWorkers

DASHBOARD_START_S = 60.0  # a loaded 2-core machine imports tornado and folds receipts first
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL


class Child(abc.ABC):
    """One supervised process: ``name`` in messages, ``log`` for its last lines."""

    name: str = "child"
    log: Path

    @abc.abstractmethod
    def pid(self) -> int | None:
        """The pid while it runs, None once it is gone."""

    @abc.abstractmethod
    def start(self) -> None:
        """Start it (again); SupervisorError or the service's error when it does not come up."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop it, within a few seconds."""

    @abc.abstractmethod
    def exit_code(self) -> int | None:
        """Its exit code (negative: the signal) once ended, None when unknown."""

    def why(self, hide: list[str]) -> str:
        """Why it is gone, in a few words, with its last log lines (secrets in ``hide`` cut)."""
        tail = log_tail(self.log, 0, hide) if self.log.exists() else ""
        return exit_reason(self.exit_code()) + (f"; log: {tail}" if tail else "")


class DaemonChild(Child):
    """The embedded broker or Flower: ``starter`` is its ``up``, ``stopper`` its ``down``."""

    def __init__(self, name: str, daemon: Daemon, starter: Callable[[], Any],
                 stopper: Callable[[], Any]) -> None:
        self.name, self.daemon, self.log = name, daemon, daemon.log_path
        self._starter, self._stopper = starter, stopper

    def pid(self) -> int | None:
        return self.daemon.running_pid()

    def start(self) -> None:
        self._starter()

    def stop(self) -> None:
        self._stopper()

    def exit_code(self) -> int | None:
        proc = self.daemon.last_proc
        return proc.poll() if proc is not None else None

    def why(self, hide: list[str]) -> str:
        # the daemon's log is long-lived: only the lines since our start are about this death
        return exit_reason(self.exit_code())


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    """``sig`` to the process group ``proc`` leads (its own session), if it still runs."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if proc.poll() is None:
            os.killpg(proc.pid, sig)


class DashboardChild(Child):
    """``mainboard dashboard --json`` on a fixed port, base path and token file."""

    name = "dashboard"

    def __init__(self, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.argv, self.log, self.env = argv, log, env
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def exit_code(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def start(self) -> None:
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                env=self.env, start_new_session=True, close_fds=True,
                preexec_fn=die_with_parent if sys.platform == "linux" else None)
        assert self.proc.stdout is not None
        line = _first_line(self.proc, DASHBOARD_START_S)
        try:
            self.url = str(json.loads(line)["url"])
        except (ValueError, KeyError, TypeError):
            self.stop()
            raise SupervisorError(f"the dashboard printed no URL within {DASHBOARD_START_S:.0f}s"
                                  f" ({self.why([])}); see {self.log}") from None
        # it prints nothing more; drained anyway, so a full pipe could never block it
        threading.Thread(target=self.proc.stdout.read, name="dashboard-stdout",
                         daemon=True).start()

    def stop(self) -> None:
        if self.proc is None:
            return
        _signal_group(self.proc, signal.SIGTERM)
        try:
            self.proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(self.proc, signal.SIGKILL)
            self.proc.wait(STOP_GRACE_S)


def _first_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The first line ``proc`` prints on stdout, '' when it exits or ``timeout`` passes first."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
        if ready:
            return proc.stdout.readline().decode(errors="replace")
        if proc.poll() is not None:
            return ""
    return ""


class WorkerChild(Child):
    """Slot ``index`` of ``workers``: a ``celery worker`` relaunched under its node name."""

    def __init__(self, workers: LocalWorkers, index: int) -> None:
        self.workers, self.index = workers, index
        self.node = workers.nodes[index].split("@")[0]
        self.name = f"worker {self.node}"
        self.log = workers.log_of(index)

    def _proc(self) -> subprocess.Popen[bytes] | None:
        procs = self.workers.procs
        return procs[self.index] if self.index < len(procs) else None

    def pid(self) -> int | None:
        proc = self._proc()
        return proc.pid if proc is not None and proc.poll() is None else None

    def exit_code(self) -> int | None:
        proc = self._proc()
        return proc.poll() if proc is not None else None

    def why(self, hide: list[str]) -> str:
        return exit_reason(self.exit_code())  # a killed worker's log says nothing of it

    def start(self) -> None:
        self.workers.launch(self.index)

    def stop(self) -> None:
        """Never asked of one slot: `up` stops all workers together (``LocalWorkers.stop``:
        warm, in parallel, SIGKILL past the budget; ``Supervisor._stop_all``)."""


__all__ = ["Child", "DaemonChild", "DashboardChild", "SupervisorError", "WorkerChild"]
