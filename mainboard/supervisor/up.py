"""`mainboard up`: one foreground process that keeps the broker, Flower, the dashboard and
N local workers running, and stops all of them on Ctrl-C or SIGTERM.

Why one supervisor: a workspace on one machine should need one command, as gammaboard's
``deploy run``. It reuses each service's own starter (``EmbeddedBroker.up``, ``Flower.up``,
``mainboard dashboard``, ``LocalWorkers``), so nothing is started differently from the
separate verbs. A child that dies is started again, with one line saying which and why;
a child that dies more than ``max_restarts`` times within ``window_s`` is a crash loop:
everything is stopped and the run ends with an error. Every pid is kept in
``.mainboard/up/up.json`` (rewritten atomically on each change), where tests and people
find them. What ``up`` found running already (a broker, a Flower) it uses and leaves running.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from mainboard.bridges.envs import worker_python
from mainboard.config import Config
from mainboard.config.brokerurl import BROKER_URL_ENV
from mainboard.daemon import (
    HOST,
    Daemon,
    fresh_port,
    port_is_free,
    read_secret,
    write_private,
)
from mainboard.errors import MainboardError, SupervisorError, UserError
from mainboard.locks import flocked
from mainboard.redact import redact_url, url_secrets
from mainboard.services.broker import EmbeddedBroker, check_broker, worker_url
from mainboard.services.flower import Flower
from mainboard.supervisor.children import Child, DaemonChild, DashboardChild, WorkerChild
from mainboard.tasks.workers import STOP_TIMEOUT_S, LocalWorkers

POLL_S = 0.25  # how often children are looked at; a signal wakes the loop at once
STOP_BUDGET_S = 10.0  # everything is gone within this after Ctrl-C
WORKER_STOP_S = 6.0  # warm shutdown, then SIGKILL; the rest of the budget is the broker's


@dataclass
class UpOptions:
    """What `mainboard up` was asked for (checked by the CLI)."""

    workers: int = 1
    host: str = HOST
    port: int = 0
    base_path: str = "/"
    flower_port: int | None = None
    max_restarts: int = 5
    window_s: float = 300.0
    token: str = ""


@dataclass
class Started:
    """What `up` announces once everything runs: the URLs (the dashboard's with its token)."""

    dashboard: str
    flower: str
    flower_user: str
    flower_secret_file: str
    broker: str
    workers: list[str]
    state_file: str
    left_running: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; never a broker or Flower password."""
        return dict(self.__dict__)


def _broker_url(config: Config) -> tuple[str, EmbeddedBroker | None]:
    """The broker's URL and, when it is the embedded one, the broker to supervise."""
    external = os.environ.get(BROKER_URL_ENV, "").strip() or config.broker.url
    if external:
        check_broker(external, config)
        return external, None
    broker = EmbeddedBroker(config.state_dir, tls=config.broker.tls)
    return "", broker


class Supervisor:
    """Starts the children, watches them, restarts the dead, stops all at the end."""

    def __init__(self, config: Config, options: UpOptions,
                 say: Callable[[str], None]) -> None:
        """``say``: one diagnostic line to stderr (the CLI's redacting warn)."""
        self.config, self.options, self.say = config, options, say
        self.dir = config.state_dir / "up"
        self.state_path = self.dir / "up.json"
        self.stopping = threading.Event()
        self.children: list[Child] = []
        self.adopted: list[str] = []
        self.deaths: dict[str, collections.deque[float]] = {}
        self.last_pids: dict[str, int | None] = {}
        self.hide: list[str] = []
        self.workers: LocalWorkers | None = None
        self.started_at = time.time()

    # ----- signals and state -----------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping.set()

    def _write_state(self, state: str) -> None:
        """up.json: every child's last pid and whether it runs; never a secret."""
        children = {}
        for child in self.children:
            pid = child.pid()
            self.last_pids[child.name] = pid or self.last_pids.get(child.name)
            children[child.name] = {"pid": self.last_pids[child.name], "running": bool(pid),
                                    "log": str(child.log)}
        data = {"pid": os.getpid(), "state": state, "started_at": self.started_at,
                "children": children, "adopted": self.adopted}
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(self.state_path)

    # ----- start ------------------------------------------------------------------------

    def _check_ports(self) -> None:
        """A port asked for and taken is bad input, told before anything starts."""
        opts = self.options
        asked = [("--port", opts.port)]
        if Flower(self.config.state_dir).running_pid() is None:  # a running one keeps its port
            asked.append(("--flower-port", opts.flower_port))
        for flag, port in asked:
            if port and not port_is_free(port):
                raise UserError(f"{flag} {port}: in use on {HOST}; choose another {flag}, "
                                "or leave it out for a free one")

    def _add(self, child: Child, already: bool = False) -> None:
        """Start ``child`` (unless it runs already) and watch it from now on."""
        if self.stopping.is_set():
            raise _Interrupted
        if not already:
            child.start()
        self.children.append(child)
        self.deaths[child.name] = collections.deque()
        self._write_state("starting")

    def _add_daemon(self, name: str, daemon: Daemon, up: Callable[[], Any],
                    down: Callable[[], Any]) -> None:
        """A daemon found running is used and left running (someone else started it)."""
        running = daemon.running_pid() is not None
        if running:
            self.adopted.append(name)
        self._add(DaemonChild(name, daemon, up, _nothing if running else down), already=running)

    def _start_all(self) -> Started:
        config, opts = self.config, self.options
        url, broker = _broker_url(config)
        if broker is not None:
            self._add_daemon("broker", broker, broker.up, broker.down)
            url = broker.url()
        self.hide = url_secrets(url)
        flower = Flower(config.state_dir)
        self._add_daemon("flower", flower,
                         lambda: flower.up(url, opts.flower_port, config_path=config.path),
                         flower.down)
        self.hide.append(read_secret(flower.secret_path) or "")
        dash = self._dashboard()
        self._add(dash)
        self.workers = LocalWorkers(opts.workers, worker_url(url, config),
                                    config.state_dir / "workers", prefix="up",
                                    python=worker_python(config) if opts.workers else
                                    sys.executable)
        for index in range(opts.workers):
            self._add(WorkerChild(self.workers, index))
        fstatus = flower.status()
        return Started(dashboard=dash.url or "", flower=fstatus.url or "",
                       flower_user=fstatus.user, flower_secret_file=fstatus.secret_file,
                       broker=broker.display_url if broker else redact_url(url),
                       workers=[n.split("@")[0] for n in self.workers.nodes],
                       state_file=str(self.state_path), left_running=list(self.adopted))

    def _dashboard(self) -> DashboardChild:
        """The dashboard child: a fixed port (a restart keeps the URL) and a 0600 token file."""
        opts = self.options
        token_file = self.dir / "dashboard.token"
        write_private(token_file, opts.token + "\n")
        port = opts.port or fresh_port()
        argv = [sys.executable, "-m", "mainboard"]
        if self.config.path:
            argv += ["--config", str(self.config.path)]
        argv += ["dashboard", "--host", opts.host, "--port", str(port), "--base-path",
                 opts.base_path, "--token-file", str(token_file), "--json"]
        env = {k: v for k, v in os.environ.items() if k != "MAINBOARD_CONFIG"}
        return DashboardChild(argv, self.dir / "dashboard.log", env)

    # ----- watch ------------------------------------------------------------------------

    def _restart(self, child: Child) -> None:
        """Start a dead child again, or end everything when it crash-loops."""
        opts = self.options
        why = child.why(self.hide)
        now = time.monotonic()
        deaths = self.deaths[child.name]
        deaths.append(now)
        while deaths and deaths[0] < now - opts.window_s:
            deaths.popleft()
        if len(deaths) > opts.max_restarts:
            raise SupervisorError(
                f"{child.name} died {len(deaths)} times within {opts.window_s:g} s (last: "
                f"{why}), past the restart budget (--max-restarts {opts.max_restarts}); "
                f"stopped everything; its log: {child.log}")
        budget = f"{len(deaths)} of {opts.max_restarts} restarts within {opts.window_s:g} s"
        try:
            child.start()
        except MainboardError as exc:  # counts as another death on the next look
            self.say(f"{child.name} died ({why}) and did not start again ({budget}): {exc}")
            return
        finally:
            self._write_state("running")
        self.say(f"{child.name} died ({why}); restarted it as pid {child.pid()} ({budget})")

    def _watch(self) -> None:
        while not self.stopping.wait(POLL_S):
            for child in self.children:
                if child.pid() is None and not self.stopping.is_set():
                    self._restart(child)

    # ----- stop -------------------------------------------------------------------------

    def _stop_all(self) -> None:
        """Workers, dashboard and Flower in parallel, then the broker (workers warm-stop
        against it); nothing is left after STOP_BUDGET_S."""
        self.stopping.set()
        first = [c for c in self.children if c.name != "broker" and not isinstance(c, WorkerChild)]
        threads = [threading.Thread(target=_quietly(c.stop, self.say, c.name), daemon=True)
                   for c in first]
        if self.workers is not None:
            workers = self.workers
            threads.append(threading.Thread(
                target=lambda: workers.stop(min(WORKER_STOP_S, STOP_TIMEOUT_S)), daemon=True))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(STOP_BUDGET_S)
        for child in self.children:
            if child.name == "broker":
                _quietly(child.stop, self.say, child.name)()

    def run(self, announce: Callable[[Started], None]) -> None:
        """Supervise until SIGINT/SIGTERM (return) or a crash loop (SupervisorError)."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with flocked(self.dir / "up.lock", wait=0) as mine:
            if not mine:
                raise UserError(f"another `mainboard up` supervises {self.config.state_dir} "
                                f"(see {self.state_path}); stop it (Ctrl-C, or kill -TERM its "
                                "pid) before starting another")
            previous = {s: signal.signal(s, self._on_signal)
                        for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                self._check_ports()
                started = self._start_all()
                self._write_state("running")
                announce(started)
                self._watch()
            except _Interrupted:
                pass
            finally:
                self._stop_all()
                self._write_state("stopped")
                for sig, handler in previous.items():
                    signal.signal(sig, handler)


class _Interrupted(Exception):
    """Ctrl-C while starting: stop what started, exit 0."""


def _quietly(stop: Callable[[], Any], say: Callable[[str], None], name: str
             ) -> Callable[[], None]:
    """``stop`` with its error told in one line: one failing stop never keeps the others."""
    def run() -> None:
        try:
            stop()
        except MainboardError as exc:
            say(f"stopping {name}: {exc}")
    return run


def _nothing() -> None:
    """The stop of a daemon `up` did not start: it stays running."""


__all__ = ["Started", "Supervisor", "SupervisorError", "UpOptions"]
