"""The real `mainboard` command in a real process, without paying for a new interpreter.

Most tests run ``python -m mainboard ARGS``, read its exit code, stdout and stderr, or talk
to it while it runs. A new interpreter importing the CLI costs 0.4 to 2.5 s of CPU under
coverage, and the suite runs the command thousands of times on two cores. So each pytest
process starts ONE server (``python -m tests.support.cliserver SOCKET``) that imports the
CLI and its heavy libraries once; each command is then a child forked from it (as
``multiprocessing``'s forkserver does), in the request's working directory and environment,
with ``sys.path`` and ``sys.argv`` as ``python -m mainboard`` sets them, its stdin, stdout and
stderr the descriptors the client passed (files, pipes, /dev/null), its exit code the
server's ``waitpid`` status (a signal is a negative code, as with ``subprocess``).
:func:`run_mainboard` is ``subprocess.run``; :func:`popen_mainboard` is ``subprocess.Popen``
(pid, pipes, ``poll``, ``wait``, ``communicate``, signals). Interpreter-level settings
(``PYTHON*`` variables) cannot change after start: a request that changes them (other than
adding ``PYTHONPATH`` entries or turning on ``PYTHONFAULTHANDLER`` or ``PYTHONUNBUFFERED``,
which the child does itself) runs a new interpreter instead, as does any call when
``MAINBOARD_TEST_FORKSERVER=0``. Tests of start-up itself (what a verb imports, a terminal,
a process tree) start their own processes.

Wire (one Unix-socket connection per command): the client sends ``LENGTH\n`` with the
three descriptors attached (SCM_RIGHTS), then a JSON request of LENGTH bytes (argv, cwd,
env, whether to start a new session); the server answers ``pid N`` when the child runs and
``exit CODE`` when it has ended.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import importlib
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from mainboard.names import hold_gc, release_gc
from tests.support.served import ServedProcess

ROOT = Path(__file__).resolve().parents[2]
# What the verbs import between them (celery, numpy, paramiko, redis, pydantic models):
# loaded once in the server instead of in every command.
PRELOAD = ("mainboard.cli", "mainboard.cli.integrate", "mainboard.cli.fleet",
           "mainboard.cli.jobs", "mainboard.cli.runs", "mainboard.cli.batch",
           "mainboard.cli.config", "mainboard.cli.broker", "mainboard.cli.study",
           "mainboard.cli.submit", "mainboard.cli.trace", "mainboard.cli.compute",
           "mainboard.cli.env", "mainboard.cli.facts", "mainboard.cli.metrics",
           "mainboard.cli.monitor", "mainboard.cli.run", "mainboard.cli.up",
           "mainboard.tasks.runner", "mainboard.integrators.runfile", "mainboard.fleet.sync",
           "celery.app", "numpy", "paramiko", "redis", "rich.console")
MAIN_FILE = str(ROOT / "mainboard" / "__main__.py")
# Under coverage (scripts/bootstrap test) the server itself runs unmeasured and each child
# starts coverage afresh: a child forked from a measured server restarted coverage in its
# at-fork handler and, on leaving, saved the server's whole pre-fork data again through the
# chained os._exit patches: about 0.25 s of CPU a command, ten times the command's own cost.
COVERAGE_PRELOAD = "MAINBOARD_CLISERVER_COVERAGE"
# Interpreter settings a child can still take on after the fork (_interpreter_settings).
EMULATED = ("PYTHONFAULTHANDLER", "PYTHONUNBUFFERED")


# ---------------------------------------------------------------- the server (its own process)

def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become ``python -m mainboard ARGV`` and exit with its code."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if request.get("session"):
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, passed in enumerate(fds):
        os.dup2(passed, fd)
    for passed in set(fds):
        os.close(passed)
    sys.argv = [MAIN_FILE, *request["argv"]]
    sys.path[:] = _request_path(request["env"])
    _interpreter_settings(request["env"])
    if os.environ.get("COVERAGE_PROCESS_START"):  # measured from here: see _server_env
        try:  # tests/covboot: coverage started as in every other process of the suite
            importlib.import_module("mainboard_coverage_start").start()
        except ImportError:
            import coverage
            coverage.process_startup()
    code = 0
    try:
        from mainboard.cli import main
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:  # the interpreter's way: the traceback, then die by SIGINT
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # what the interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if code == -signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _interpreter_settings(env: Mapping[str, str]) -> None:
    """What ``PYTHONFAULTHANDLER`` and ``PYTHONUNBUFFERED`` do at an interpreter's start."""
    if env.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    if env.get("PYTHONUNBUFFERED"):
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            setattr(sys, name, io.TextIOWrapper(io.FileIO(stream.fileno(), "w", closefd=False),
                                                encoding=stream.encoding, errors=stream.errors,
                                                write_through=True))


def _entries(env: Mapping[str, str]) -> list[str]:
    """``PYTHONPATH``'s folders as the interpreter puts them on ``sys.path``: absolute."""
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


# resolved in the server's folder, as at its start; on sys.path after its first entry
_SERVER_ENTRIES = list(dict.fromkeys(_entries(os.environ)))


def _request_path(env: Mapping[str, str]) -> list[str]:
    """``sys.path`` as ``python -m`` in the request's folder with its ``PYTHONPATH`` builds
    it: the folder, the variable's entries, then the interpreter's own (stdlib, site, and
    what a ``sitecustomize`` added, duplicates kept as the interpreter keeps them)."""
    own = sys.path[1 + len(_SERVER_ENTRIES):]
    return [os.getcwd(), *dict.fromkeys(_entries(env)), *own]


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request: ``LENGTH\\n`` carrying stdin, stdout and stderr, then its JSON."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while b"\n" not in data:
        data += conn.recv(1 << 16)
    head, body = data.split(b"\n", 1)
    while len(body) < int(head):
        body += conn.recv(1 << 16)
    return json.loads(body), fds


def serve(path: str) -> None:
    """Accept commands on ``path`` until the client closes our stdin."""
    hold_gc(limit=None)  # as the command does: no collection walks the preload's objects,
    for name in PRELOAD:  # in the server or in any child
        importlib.import_module(name)
    if os.environ.get(COVERAGE_PRELOAD):
        for name in ("coverage", "coverage.collector", "coverage.inorout"):
            importlib.import_module(name)
    release_gc()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    print("ready", flush=True)
    waiting: dict[int, socket.socket] = {}
    while True:
        try:
            ready, _, _ = select.select([listener, wake_r, sys.stdin], [], [])
        except InterruptedError:
            continue
        if sys.stdin in ready and not sys.stdin.buffer.read1(1):
            break  # the client's process ended
        if wake_r in ready:
            os.read(wake_r, 4096)
        if listener in ready:
            conn, _ = listener.accept()
            request, fds = _receive(conn)
            pid = os.fork()
            if pid == 0:
                for other in (listener, conn, *waiting.values()):
                    other.close()
                for fd in (wake_r, wake_w):
                    os.close(fd)
                _child(request, fds)
            for fd in fds:  # the child's now: a pipe's end left open here would never close
                os.close(fd)
            conn.sendall(f"pid {pid}\n".encode())
            waiting[pid] = conn
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()


# ---------------------------------------------------------------- the client (in pytest)

_server: subprocess.Popen[bytes] | None = None
_socket_path = ""
_lock = threading.Lock()


def _interpreter_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def _ensure_server() -> str:
    """The socket of this process's server, started on first use."""
    global _server, _socket_path
    with _lock:
        if _server is None or _server.poll() is not None:
            folder = tempfile.mkdtemp(prefix="mb-cli-")
            _socket_path = os.path.join(folder, "s")
            _server = subprocess.Popen([sys.executable, "-m", "tests.support.cliserver",
                                        _socket_path], cwd=ROOT, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, env=_server_env())
            assert _server.stdout is not None
            line = _server.stdout.readline()
            if line.strip() != b"ready":
                raise RuntimeError(f"tests/support/cliserver.py did not start: {line!r}")
        return _socket_path


def _server_env() -> dict[str, str]:
    """The server's environment: unmeasured, with coverage loaded for its children."""
    env = dict(os.environ)
    if env.pop("COVERAGE_PROCESS_START", None):
        env[COVERAGE_PRELOAD] = "1"
    return env


def _use_server(env: Mapping[str, str]) -> bool:
    """Whether a child of the server can be the command: interpreter settings as the
    server's, but for ``PYTHONPATH`` entries added (the child puts them on ``sys.path``;
    one taken away could leave a module importable that a new interpreter would not find)
    and ``EMULATED`` ones the server has not set (the child turns them on)."""
    if os.environ.get("MAINBOARD_TEST_FORKSERVER", "1") == "0":
        return False
    mine, theirs = _interpreter_env(os.environ), _interpreter_env(env)
    for name in EMULATED:
        if name not in mine:
            theirs.pop(name, None)
    mine_path, their_path = mine.pop("PYTHONPATH", ""), theirs.pop("PYTHONPATH", "")
    return mine == theirs and set(_entries({"PYTHONPATH": mine_path})) <= set(
        _entries({"PYTHONPATH": their_path}))


def run_mainboard(args: Sequence[str], *, cwd: str | os.PathLike[str] | None = None,
                  env: Mapping[str, str] | None = None, input: str | None = None,
                  timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, -m, mainboard, *args], capture_output=True, text=True)``:
    the same result, from a child of this process's server when the environment allows."""
    with popen_mainboard(args, cwd=cwd, env=env, stdin=subprocess.PIPE, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            out, err = proc.communicate(input or "", timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout or 0, out, err) from None
    assert proc.returncode is not None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


Stream = int | IO[Any] | None


def popen_mainboard(args: Sequence[str], *, cwd: str | os.PathLike[str] | None = None,
                    env: Mapping[str, str] | None = None, stdin: Stream = None,
                    stdout: Stream = None, stderr: Stream = None, text: bool = False,
                    start_new_session: bool = False, **other: Any
                    ) -> ServedProcess | subprocess.Popen[Any]:
    """``subprocess.Popen([python, -m, mainboard, *args], ...)``: a child of this process's
    server when the environment allows (and no other Popen option is asked for)."""
    argv = [sys.executable, "-m", "mainboard", *args]
    full_env = dict(os.environ if env is None else env)
    other = {k: v for k, v in other.items() if v is not None}
    if other or not _use_server(full_env):
        return subprocess.Popen(argv, cwd=cwd, env=full_env, stdin=stdin, stdout=stdout,
                                stderr=stderr, text=text, start_new_session=start_new_session,
                                **other)
    ours: list[IO[Any] | None] = []
    theirs: list[int] = []
    with contextlib.ExitStack() as closing:  # our copies of what the child gets
        for fd, want in enumerate((stdin, stdout, stderr)):
            mine, passed = _stream(fd, want, theirs, closing)
            mode = ("w" if fd == 0 else "r") + ("" if text else "b")
            ours.append(None if mine is None else open(mine, mode))
            theirs.append(passed)
        request = json.dumps({"argv": list(args), "cwd": os.path.abspath(cwd or os.getcwd()),
                              "env": full_env, "session": start_new_session}).encode()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(_ensure_server())
        socket.send_fds(conn, [b"%d\n" % len(request)], theirs)
        conn.sendall(request)
    return ServedProcess(argv, conn, (ours[0], ours[1], ours[2]))


def _stream(fd: int, want: Stream, passed: list[int], closing: contextlib.ExitStack
            ) -> tuple[int | None, int]:
    """(our end of a pipe or None, the descriptor the child gets as ``fd``)."""
    if want == subprocess.PIPE:
        read, write = os.pipe()
        mine, theirs = (write, read) if fd == 0 else (read, write)
        closing.callback(os.close, theirs)
        return mine, theirs
    if want == subprocess.DEVNULL:
        theirs = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
        closing.callback(os.close, theirs)
        return None, theirs
    if want == subprocess.STDOUT:
        return None, passed[1]
    if want is None:
        return None, fd
    return None, want if isinstance(want, int) else want.fileno()


if __name__ == "__main__":
    serve(sys.argv[1])
