"""Process, port and secret-file helpers shared by the workspace's daemons (broker, Flower).

Both start a loopback service in its own session, keep its password in a 0600 file,
remember its pid and port, and must never signal a process that is not theirs.
:class:`Daemon` holds that life cycle once; the services add what differs.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from mainboard.errors import MainboardError
from mainboard.locks import flocked
from mainboard.redact import redact_text

HOST = "127.0.0.1"
FORBIDDEN_PORTS = frozenset({6379})  # a foreign Redis may own the default port
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before exec: get SIGTERM when the parent dies (Linux), never orphaned."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def exit_reason(code: int | None) -> str:
    """How a process ended, for one line: ``exited with code 1``, ``killed by SIGKILL``."""
    if code is None:
        return "process gone"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exited with code {code}"


def port_is_free(port: int) -> bool:
    """True if a server setting SO_REUSEADDR (redis, tornado) could bind 127.0.0.1:port now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def fresh_port() -> int:
    """A free loopback port chosen by the kernel, never a forbidden one."""
    while True:
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port not in FORBIDDEN_PORTS:
            return port


def proc_state(pid: int, tid: int | None = None) -> str | None:
    """The state letter (R, S, Z...) of ``/proc/PID/stat``, or of one thread's, None if gone
    or without /proc."""
    where = f"/proc/{pid}/task/{tid}/stat" if tid is not None else f"/proc/{pid}/stat"
    try:
        fields = Path(where).read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0] if fields else None


def process_exiting(pid: int) -> bool:
    """True while any thread of ``pid`` has not yet exited; False once it is a zombie, gone,
    or without /proc. The main thread can be a zombie while the others still exit, holding
    the files they share (a listening socket): each thread is looked at."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return False
    return any(proc_state(pid, tid) not in (None, "Z", "X") for tid in tids)


def process_cmdline(pid: int) -> str | None:
    """Command line of a live (non-zombie) process, or None if it is gone."""
    proc = Path(f"/proc/{pid}")
    if Path("/proc/self").is_dir():
        if proc_state(pid) in (None, "Z"):
            return None
        try:
            raw = (proc / "cmdline").read_bytes()
        except OSError:
            return None
        return raw.replace(b"\0", b" ").decode(errors="replace").strip() or None
    # no /proc (macOS): ask ps; a zombie shows state Z
    try:
        done = subprocess.run(["ps", "-o", "stat=,command=", "-p", str(pid)],
                              capture_output=True, text=True, check=False)
    except OSError:  # no ps either: we cannot prove it is ours, so never treat it as ours
        return None
    line = done.stdout.strip()
    if done.returncode != 0 or not line or line.startswith("Z"):
        return None
    return line.split(None, 1)[1] if " " in line else None


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` created with mode 0600 (and re-tightened if it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(0o600)


def read_secret(path: Path) -> str | None:
    """The secret in ``path`` (re-tightened to 0600), None if the file is absent or empty."""
    try:
        path.chmod(0o600)
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def read_or_create_secret(path: Path, nbytes: int = 24) -> str:
    """The secret in ``path``, or a new random one in a fresh 0600 file.

    ``token_urlsafe`` gives [A-Za-z0-9_-]: safe in redis.conf and Flower's "user:pw" list.
    """
    existing = read_secret(path)
    if existing:
        return existing
    secret = secrets.token_urlsafe(nbytes)
    write_private(path, secret + "\n")
    return secret


def log_tail(path: Path, offset: int, hide: list[str]) -> str:
    """The last three log lines written since ``offset``, with every secret in ``hide`` scrubbed."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    text = redact_text(text, also=hide)  # and any URL password the log quotes
    return " | ".join(line.strip() for line in text.strip().splitlines()[-3:])


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists on this machine (signal 0; another user's process counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Daemon:
    """A detached loopback service whose files live under the workspace's ``state_dir``.

    The broker and Flower share one set of rules, kept here so they cannot drift apart:
    0700 directories, a 0600 secret, an atomically replaced pid/port record, a flock
    around up/down, a pid trusted only while its command line is still ours, and start
    errors that quote the log with every secret scrubbed. Subclasses name the files
    and say how to tell the service answers.
    """

    program: ClassVar[str] = "daemon"  # the process as errors name it ("redis-server", "flower")
    error: ClassVar[type[MainboardError]] = MainboardError
    secret_bytes: ClassVar[int] = 24
    start_timeout: ClassVar[float] = 15.0
    poll_interval: ClassVar[float] = 0.05  # seconds between readiness checks while starting
    record_indent: ClassVar[int | None] = None  # json.dumps indent of the pid/port record
    port_in_exit_error: ClassVar[bool] = False  # "exited with code N on port P: ..."

    def __init__(self, state_dir: Path, subdir: str, *, secret: str, conf: str, log: str,
                 record: str, lock: str) -> None:
        """``secret``, ``record`` and ``lock`` are relative to ``state_dir``; ``conf`` and
        ``log`` to its ``subdir``, the service's private directory and working directory."""
        self.state_dir = Path(state_dir).absolute()
        self.dir = self.state_dir / subdir
        self.secret_path = self.state_dir / secret
        self.conf_path = self.dir / conf
        self.log_path = self.dir / log
        self.state_path = self.state_dir / record
        self._lock_path = self.state_dir / lock
        self.last_proc: subprocess.Popen[bytes] | None = None  # the last one this object started

    # ----- files -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise up/down between processes sharing this state dir."""
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.dir.mkdir(mode=0o700, exist_ok=True)
        self.dir.chmod(0o700)  # re-tightened: it holds the config with the password
        with flocked(self._lock_path):
            yield

    def _password(self) -> str | None:
        """The password from the secret file (re-tightened to 0600), None if absent."""
        return read_secret(self.secret_path)

    def _ensure_password(self) -> str:
        """The existing password, or a new random one written to a fresh 0600 file."""
        return read_or_create_secret(self.secret_path, self.secret_bytes)

    def _read_record(self) -> dict[str, Any]:
        """The pid/port record as written by :meth:`_record`, {} if missing or unreadable."""
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _recorded(self) -> tuple[int | None, int | None]:
        """(pid, port) as last recorded; anything but an int counts as unknown."""
        data = self._read_record()
        pid, port = data.get("pid"), data.get("port")
        return (pid if isinstance(pid, int) else None), (port if isinstance(port, int) else None)

    def _record(self, **data: Any) -> None:
        """Replace the record atomically, so a concurrent reader never sees half of it."""
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=self.record_indent) + "\n")
        tmp.replace(self.state_path)

    def _tail(self, offset: int, hide: list[str]) -> str:
        """Last log lines written since ``offset``, with every secret in ``hide`` scrubbed."""
        return log_tail(self.log_path, offset, hide)

    # ----- process -----------------------------------------------------------------------

    def _marks(self) -> tuple[str, ...]:
        """Strings that all appear in our process's command line (and in no stranger's)."""
        raise NotImplementedError

    def _is_ours(self, pid: int | None) -> bool:
        """True if ``pid`` is alive and is our service: a recycled pid is never signalled."""
        if not pid or pid <= 0:
            return False
        cmdline = process_cmdline(pid)
        return bool(cmdline) and all(mark in cmdline for mark in self._marks())

    def running_pid(self) -> int | None:
        """The recorded pid while it is still our service, else None (a supervisor's check)."""
        pid = self._recorded()[0]
        return pid if self._is_ours(pid) else None

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        """True once ``pid`` is no longer our service, False after ``timeout``. An exiting
        process's command line empties (its memory goes first) a moment before its files
        close, its listening socket among them: a stop that reported then left the port
        taken for the next start (seen in tests), so the exit is waited for too."""
        deadline = time.monotonic() + timeout
        while self._is_ours(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        while process_exiting(pid) and time.monotonic() < deadline:
            time.sleep(0.005)
        return True

    def _abandon(self, proc: subprocess.Popen[bytes]) -> None:
        """Get rid of a process that never answered (here: ask it to terminate)."""
        proc.terminate()

    def _start(self, argv: list[str], port: int, hide: list[str], ready: Callable[[], bool],
               env: dict[str, str] | None = None) -> int:
        """Start ``argv`` in its own session, logging to ``log_path``; return its pid once
        ``ready()`` is true while it still runs. A password belongs in the config file,
        never in ``argv``; errors quote the log with every secret in ``hide`` scrubbed."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    env=env, cwd=self.dir, start_new_session=True,
                                    close_fds=True)
        self.last_proc = proc
        # reap it whenever it exits, so a long-lived caller never keeps a zombie
        threading.Thread(target=proc.wait, name=f"reap-{self.dir.name}-{proc.pid}",
                         daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                where = f" on port {port}" if self.port_in_exit_error else ""
                raise self.error(f"{self.program} exited with code {proc.returncode}{where}: "
                                 f"{self._tail(offset, hide) or 'no log output'} "
                                 f"(log: {self.log_path})")
            if ready() and proc.poll() is None:  # a stranger on the port is not success
                return proc.pid
            time.sleep(self.poll_interval)
        self._abandon(proc)
        raise self.error(f"{self.program} did not answer on {HOST}:{port} within "
                         f"{self.start_timeout:.0f}s: {self._tail(offset, hide)} "
                         f"(log: {self.log_path})")
