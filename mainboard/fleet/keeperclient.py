"""The fleet keeper as its callers see it: start it, wake it, ask it, stop it.

Why apart from :mod:`mainboard.fleet.keeper` (the daemon): ``fleet up``, the autoscaler
(a thread inside the daemon), ``fleet status`` and the run's fleet sync all talk to the
keeper, and the daemon runs the autoscaler; with both halves in one file the fleet's
files imported each other in a circle. Here is only what crosses the process boundary:
the lock and pid file that say a keeper runs, the ``python -m mainboard.fleet.keeper``
command that starts one, ``WAKE_SIGNAL``, and ``tunnels.json``, which the daemon writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from mainboard.daemon import process_cmdline
from mainboard.errors import TunnelError
from mainboard.statedir import fleet_dir

KEEPER_MODULE = "mainboard.fleet.keeper"  # the daemon, run as ``python -m``
WAKE_SIGNAL = signal.SIGUSR1  # "the receipts changed: look now", instead of the next tick
_STARTING = threading.Lock()  # one start at a time in this process (hosts launch in threads)


def keeper_paths(state_dir: Path) -> dict[str, Path]:
    """The keeper's files under the fleet's state folder: lock, pid, tunnels.json, log."""
    base = fleet_dir(state_dir)
    return {"lock": base / "keeper.lock", "pid": base / "keeper.pid",
            "status": base / "tunnels.json", "log": base / "keeper.log"}


def keeper_pid(state_dir: Path) -> int | None:
    """The running keeper's pid (its lock is held), else None."""
    paths = keeper_paths(state_dir)
    with open(paths["lock"], "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with contextlib.suppress(OSError, ValueError):
                return int(paths["pid"].read_text().strip())
            return -1
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def ensure_keeper(root: Path, config_path: Path | None, state_dir: Path) -> None:
    """Start the keeper for this workspace unless one runs (it refuses to run twice)."""
    with _STARTING:
        _ensure_keeper(root, config_path, state_dir)


def wake_keeper(state_dir: Path) -> None:
    """Make the running keeper read the receipts now (a new tunnel is wanted); its pid is
    checked to be a keeper first, so a stale pid file never signals a stranger."""
    pid = keeper_pid(state_dir)
    if pid is None or pid <= 0 or KEEPER_MODULE not in (process_cmdline(pid) or ""):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, WAKE_SIGNAL)


def _ensure_keeper(root: Path, config_path: Path | None, state_dir: Path) -> None:
    if keeper_pid(state_dir) is not None:
        return
    argv = [sys.executable, "-m", KEEPER_MODULE, "--root", str(root)]
    if config_path is not None:
        argv += ["--config", str(config_path)]
    with open(keeper_paths(state_dir)["log"], "ab") as out:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=root,
                         start_new_session=True, close_fds=True)
    deadline = time.monotonic() + 10
    while keeper_pid(state_dir) is None and time.monotonic() < deadline:
        time.sleep(0.05)


def tunnel_status(state_dir: Path) -> dict[str, dict[str, object]]:
    """What the keeper last wrote about its tunnels, by worker id."""
    try:
        data = json.loads(keeper_paths(state_dir)["status"].read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def wait_tunnel(root: Path, config_path: Path | None, state_dir: Path, worker_id: str,
                timeout: float) -> int:
    """Block until the keeper forwards ``worker_id``'s tunnel; its remote port."""
    deadline = time.monotonic() + timeout
    seen: dict[str, object] = {}
    while time.monotonic() < deadline:
        seen = tunnel_status(state_dir).get(worker_id, {})
        if seen.get("healthy") and isinstance(seen.get("remote_port"), int):
            return int(seen["remote_port"])  # type: ignore[arg-type]
        ensure_keeper(root, config_path, state_dir)  # it may have just exited: start again
        time.sleep(0.1)
    raise TunnelError(f"the reverse tunnel for worker {worker_id} did not come up within "
                      f"{timeout:g}s: {seen.get('error') or 'no answer from the fleet keeper'} "
                      f"(log: {keeper_paths(state_dir)['log']})")


def stop_keeper(state_dir: Path, timeout: float = 15.0) -> None:
    """SIGTERM the keeper (its tunnels close) and wait until its lock is free."""
    pid = keeper_pid(state_dir)
    if pid is None or pid <= 0:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while keeper_pid(state_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.05)


__all__ = ["KEEPER_MODULE", "WAKE_SIGNAL", "ensure_keeper", "keeper_paths", "keeper_pid",
           "stop_keeper", "tunnel_status", "wait_tunnel", "wake_keeper"]
