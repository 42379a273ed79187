"""Flower, Celery's web monitor, for the workspace: loopback only, behind basic auth.

``Flower(state_dir).up(broker_url)`` starts ``celery -A mainboard.tasks.app flower``
bound to 127.0.0.1 with basic auth for user ``mainboard`` and a random password kept in
``state_dir/flower.secret`` (mode 0600), like the broker's. The password reaches Flower
through a generated config file (``state_dir/flower/flowerconfig.py``, mode 0600) passed
as ``--conf=PATH``: it is never in a process's arguments, in the environment, or in
anything printed. The broker URL (with its password) goes in ``$MAINBOARD_BROKER_URL``,
as for workers. Inherited ``FLOWER_*`` variables are dropped so that nothing (say
``FLOWER_UNAUTHENTICATED_API``) can loosen this from outside.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mainboard.daemon import (
    HOST,
    fresh_port,
    log_tail,
    port_is_free,
    process_cmdline,
    read_or_create_secret,
    write_private,
)
from mainboard.errors import MainboardError, UserError
from mainboard.locks import flocked

USER = "mainboard"
BROKER_URL_ENV = "MAINBOARD_BROKER_URL"
START_TIMEOUT = 90.0  # importing celery+flower takes seconds on a loaded 2-core machine
STOP_TIMEOUT = 15.0


class FlowerError(MainboardError):
    """Flower could not be started or stopped."""


@dataclass(frozen=True)
class FlowerStatus:
    """Whether Flower runs, where to open it and where its password is (never the password)."""

    running: bool
    state_dir: str
    secret_file: str
    log_file: str
    user: str = USER
    pid: int | None = None
    port: int | None = None
    url: str | None = None
    answering: bool | None = None
    action: str | None = None  # started | already running | stopped | not running
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"state": "running" if self.running else "stopped", **asdict(self)}


def _url_password(url: str) -> str:
    """The password in a broker URL ("" if none or unparseable), to scrub it from log tails."""
    try:
        return urlsplit(url).password or ""
    except ValueError:
        return ""


class Flower:
    """The workspace's Flower: config, log, pid and port under ``state_dir/flower``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir).absolute()
        self.dir = self.state_dir / "flower"
        self.secret_path = self.state_dir / "flower.secret"
        self.conf_path = self.dir / "flowerconfig.py"
        self.log_path = self.dir / "flower.log"
        self.state_path = self.dir / "flower.json"
        self._lock_path = self.dir / "flower.lock"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise up/down between processes sharing this state dir."""
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.dir.mkdir(mode=0o700, exist_ok=True)
        self.dir.chmod(0o700)
        with flocked(self._lock_path):
            yield

    def _recorded(self) -> tuple[int | None, int | None]:
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return None, None
        if not isinstance(data, dict):
            return None, None
        pid, port = data.get("pid"), data.get("port")
        return (pid if isinstance(pid, int) else None), (port if isinstance(port, int) else None)

    def _record(self, **data: Any) -> None:
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data) + "\n")
        tmp.replace(self.state_path)

    def _is_ours(self, pid: int | None) -> bool:
        """True if ``pid`` is alive and is a Flower running our config file."""
        if not pid or pid <= 0:
            return False
        cmdline = process_cmdline(pid) or ""
        return "flower" in cmdline and f"--conf={self.conf_path}" in cmdline

    def _base(self) -> FlowerStatus:
        return FlowerStatus(running=False, state_dir=str(self.state_dir),
                            secret_file=str(self.secret_path), log_file=str(self.log_path))

    def url(self, port: int) -> str:
        """Where to open it; credentials are never part of it."""
        return f"http://{HOST}:{port}/"

    def answers(self, port: int, timeout: float = 2.0) -> bool:
        """True when Flower's /healthcheck answers (it needs no credentials)."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/healthcheck",
                                        timeout=timeout) as reply:
                return bool(reply.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def status(self) -> FlowerStatus:
        """Running or stopped, with pid, port and URL."""
        pid, port = self._recorded()
        base = replace(self._base(), port=port)
        if not self._is_ours(pid):
            return replace(base, note=f"stale pid {pid} (process gone)" if pid else None)
        return replace(base, running=True, pid=pid, url=self.url(port or 0),
                       answering=self.answers(port or 0))

    def _write_conf(self, port: int, password: str) -> None:
        """The only file besides flower.secret that holds the password (mode 0600)."""
        credential = f"{USER}:{password}"
        lines = ["# generated by `mainboard flower` on every start; holds the password",
                 f"address = {HOST!r}", f"port = {port!r}",
                 f"basic_auth = [{credential!r}]", "persistent = False"]
        write_private(self.conf_path, "\n".join(lines) + "\n")

    def _tail(self, offset: int, hide: list[str]) -> str:
        """Last log lines since ``offset``, with every secret scrubbed."""
        return log_tail(self.log_path, offset, hide)

    def _port(self, wanted: int | None, previous: int | None) -> int:
        if wanted is not None:
            if not 0 < wanted < 65536:
                raise UserError(f"--port {wanted}: not a TCP port; valid: 1-65535")
            if not port_is_free(wanted):
                raise UserError(f"port {wanted} on {HOST} is in use; choose another --port "
                                "or leave it out to pick a free one")
            return wanted
        if previous and port_is_free(previous):
            return previous
        return fresh_port()

    def up(self, broker_url: str, port: int | None = None, *,
           python: str = sys.executable) -> FlowerStatus:
        """Start Flower against ``broker_url``, or report the one already running."""
        with self._locked():
            current = self.status()
            if current.running:
                note = (f"already running on port {current.port}; `mainboard flower stop` "
                        "first to change the port") if port and port != current.port else None
                return replace(current, action="already running", note=note)
            password = read_or_create_secret(self.secret_path)
            chosen = self._port(port, current.port)
            self._write_conf(chosen, password)
            pid = self._launch(python, broker_url, chosen, [password, _url_password(broker_url)])
            self._record(pid=pid, port=chosen, started_at=time.time())
        return replace(self.status(), action="started")

    def _launch(self, python: str, broker_url: str, port: int, hide: list[str]) -> int:
        """Start Flower in its own session; return its pid once /healthcheck answers."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
        env[BROKER_URL_ENV] = broker_url
        argv = [python, "-m", "celery", "-A", "mainboard.tasks.app", "flower",
                f"--conf={self.conf_path}"]
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            os.chmod(self.log_path, 0o600)
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    env=env, cwd=self.dir, start_new_session=True,
                                    close_fds=True)
        threading.Thread(target=proc.wait, name=f"reap-flower-{proc.pid}", daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise FlowerError(f"flower exited with code {proc.returncode}: "
                                  f"{self._tail(offset, hide) or 'no log output'} "
                                  f"(log: {self.log_path})")
            if self.answers(port, timeout=1.0) and proc.poll() is None:
                return proc.pid
            time.sleep(0.2)
        self._stop_pid(proc.pid)
        raise FlowerError(f"flower did not answer on {HOST}:{port} within {START_TIMEOUT:.0f}s: "
                          f"{self._tail(offset, hide)} (log: {self.log_path})")

    def _stop_pid(self, pid: int) -> None:
        """SIGTERM (Flower exits cleanly on it), then SIGKILL; only ever our verified pid."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self._is_ours(pid):
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + STOP_TIMEOUT
            while self._is_ours(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        if self._is_ours(pid):
            raise FlowerError(f"flower pid {pid} did not stop after SIGTERM and SIGKILL")

    def down(self) -> FlowerStatus:
        """Stop Flower; the port is remembered for the next start."""
        with self._locked():
            current = self.status()
            if not current.running or current.pid is None:
                return replace(current, action="not running")
            self._stop_pid(current.pid)
            self._record(port=current.port)
        return replace(self._base(), pid=current.pid, port=current.port, action="stopped")
