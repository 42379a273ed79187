"""Flower, Celery's web monitor, for the workspace: loopback only, behind basic auth.

``Flower(state_dir).up(broker_url)`` starts ``celery -A mainboard.tasks.app flower``
bound to 127.0.0.1 with basic auth for user ``mainboard`` and a random password kept in
``state_dir/flower.secret`` (mode 0600), like the broker's. The password reaches Flower
through a generated config file (``state_dir/flower/flowerconfig.py``, mode 0600) passed
as ``--conf=PATH``: it is never in a process's arguments, in the environment, or in
anything printed. The broker URL (with its password) goes in ``$MAINBOARD_BROKER_URL``,
as for workers. Inherited ``FLOWER_*`` variables are dropped so that nothing (say
``FLOWER_UNAUTHENTICATED_API``) can loosen this from outside.

The same ``/metrics`` carries the workspace's own series (``mainboard_*``: queues, fleet
workers, allocations, spend, runs; :mod:`mainboard.metrics.flower`), so one Prometheus
scrape job with this basic auth gets both.

Flower exempts ``/metrics`` and ``/healthcheck`` from authentication by design (its
auth.rst lists them) and has no option to change that; ``/metrics`` names every task
and worker. Its config file is Python that Flower executes at start, so the generated one
calls :func:`guard_open_endpoints`, which puts both behind the same basic auth as the
pages and the API. Should that ever fail (a Flower that moved those handlers), Flower
does not start rather than start open. The loopback-only binding stays the outer wall:
``unix_socket`` would be tighter still but no browser can open it, and ``url_prefix``
only moves the endpoints.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from mainboard.config.brokerurl import BROKER_URL_ENV
from mainboard.daemon import HOST, Daemon, fresh_port, port_is_free, write_private
from mainboard.errors import FlowerError, UserError
from mainboard.names import lazy
from mainboard.redact import install_log_redaction, url_secrets

USER = "mainboard"
START_TIMEOUT = 90.0  # importing celery+flower takes seconds on a loaded 2-core machine
STOP_TIMEOUT = 15.0


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


def guard_open_endpoints() -> None:
    """Inside the Flower process: /metrics and /healthcheck ask for credentials like every
    page, and Flower's own log lines are redacted. Run by the generated flowerconfig.py.
    """
    monitor, authenticated = lazy("flower.monitor"), lazy("tornado.web").authenticated
    for handler in (monitor.Metrics, monitor.Healthcheck):
        if not getattr(handler.get, "mainboard_guarded", False):
            guarded = authenticated(handler.get)
            guarded.mainboard_guarded = True  # type: ignore[attr-defined]
            handler.get = guarded  # type: ignore[method-assign]
    install_log_redaction()


class Flower(Daemon):
    """The workspace's Flower: config, log, pid and port under ``state_dir/flower``."""

    program = "flower"
    error = FlowerError
    start_timeout = START_TIMEOUT
    poll_interval = 0.2  # each check is an HTTP request

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir, "flower", secret="flower.secret", conf="flowerconfig.py",
                         log="flower.log", record="flower/flower.json", lock="flower/flower.lock")

    def _marks(self) -> tuple[str, ...]:
        """A Flower running our config file."""
        return "flower", f"--conf={self.conf_path}"

    def _base(self) -> FlowerStatus:
        return FlowerStatus(running=False, state_dir=str(self.state_dir),
                            secret_file=str(self.secret_path), log_file=str(self.log_path))

    def url(self, port: int) -> str:
        """Where to open it; credentials are never part of it."""
        return f"http://{HOST}:{port}/"

    def answers(self, port: int, timeout: float = 2.0) -> bool:
        """True when Flower's /healthcheck answers our credentials (it refuses everyone else)."""
        request = urllib.request.Request(f"http://{HOST}:{port}/healthcheck")
        password = self._password()
        if password:
            token = base64.b64encode(f"{USER}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
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

    def _write_conf(self, port: int, password: str, config_path: Path | None) -> None:
        """The only file besides flower.secret that holds the password (mode 0600)."""
        credential = f"{USER}:{password}"
        workspace = (str(self.state_dir), str(config_path) if config_path else None)
        lines = ["# generated by `mainboard flower` on every start; holds the password",
                 "from mainboard.metrics.flower import install as mainboard_metrics",
                 "from mainboard.services.flower import guard_open_endpoints",
                 f"mainboard_metrics(*{workspace!r})  # the workspace's series on /metrics",
                 "guard_open_endpoints()  # /metrics and /healthcheck behind basic auth too",
                 f"address = {HOST!r}", f"port = {port!r}",
                 f"basic_auth = [{credential!r}]", "persistent = False"]
        write_private(self.conf_path, "\n".join(lines) + "\n")

    def _port(self, wanted: int | None, previous: int | None) -> tuple[int, str | None]:
        """``wanted`` (1-65535: the verbs' --port checks that) when free, else the last
        port when free, else a fresh one; with a note when the last port could not be had
        (a bookmarked URL changes: say why)."""
        if wanted is not None:
            if not port_is_free(wanted):
                raise UserError(f"port {wanted} on {HOST} is in use; choose another --port "
                                "or leave it out to pick a free one")
            return wanted, None
        if previous and port_is_free(previous):
            return previous, None
        return fresh_port(), (f"its last port, {previous}, was in use: started on another"
                              if previous else None)

    def up(self, broker_url: str, port: int | None = None, *,
           python: str = sys.executable, config_path: Path | None = None) -> FlowerStatus:
        """Start Flower against ``broker_url``, or report the one already running;
        ``config_path`` is the workspace's mainboard.toml, for its metrics."""
        with self._locked():
            current = self.status()
            if current.running:
                note = (f"already running on port {current.port}; `mainboard flower stop` "
                        "first to change the port") if port and port != current.port else None
                return replace(current, action="already running", note=note)
            password = self._ensure_password()
            chosen, note = self._port(port, current.port)
            self._write_conf(chosen, password, config_path)
            pid = self._launch(python, broker_url, chosen, [password, *url_secrets(broker_url)])
            self._record(pid=pid, port=chosen, started_at=time.time())
        return replace(self.status(), action="started", note=note)

    def _launch(self, python: str, broker_url: str, port: int, hide: list[str]) -> int:
        """Start Flower in its own session; return its pid once /healthcheck answers."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
        env[BROKER_URL_ENV] = broker_url
        argv = [python, "-m", "celery", "-A", "mainboard.tasks.app", "flower",
                f"--conf={self.conf_path}"]
        self.log_path.touch(mode=0o600)  # private before Flower writes to it
        self.log_path.chmod(0o600)
        return self._start(argv, port, hide, lambda: self.answers(port, timeout=1.0), env=env)

    def _abandon(self, proc: subprocess.Popen[bytes]) -> None:
        """A Flower that never answered is stopped for good: SIGTERM, then SIGKILL."""
        self._stop_pid(proc.pid)

    def _stop_pid(self, pid: int) -> None:
        """SIGTERM (Flower exits cleanly on it), then SIGKILL; only ever our verified pid."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self._is_ours(pid):
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            self._wait_gone(pid, STOP_TIMEOUT)
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
