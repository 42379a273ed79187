"""The real `mainboard` command in a real process, without paying for a new interpreter.

Most tests run ``python -m mainboard ARGS`` and read its exit code, stdout and stderr. A new
interpreter importing the CLI costs 0.4 to 2.5 s of CPU under coverage, and the suite runs
the command thousands of times on two cores. So each pytest process starts ONE server
(``python -m tests.support.cliserver SOCKET``) that imports the CLI and its heavy libraries
once; each command is then a child forked from it (as ``multiprocessing``'s forkserver
does), in the request's working directory and environment, with ``sys.path[0]`` and
``sys.argv`` as ``python -m mainboard`` sets them, its stdin, stdout and stderr in files,
its exit code the server's ``waitpid`` status (a signal is a negative code, as with
``subprocess``). Interpreter-level settings (``PYTHON*`` variables) cannot change after
start: a request that changes them runs a new interpreter instead, as does any call when
``MAINBOARD_TEST_FORKSERVER=0``. Tests of start-up itself (what a verb imports, signals to
a running command) start their own processes.

Wire (one Unix-socket connection per command): the client sends one JSON line (argv, cwd,
env, the three file paths); the server answers ``pid N`` when the child runs and
``exit CODE`` when it has ended.
"""

from __future__ import annotations

import atexit
import importlib
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
from typing import Any

from mainboard.names import hold_gc, release_gc

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


# ---------------------------------------------------------------- the server (its own process)

def _child(request: dict[str, Any]) -> None:
    """In the forked child: become ``python -m mainboard ARGV`` and exit with its code."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, mode in ((0, request["stdin"], os.O_RDONLY),
                           (1, request["stdout"], os.O_WRONLY),
                           (2, request["stderr"], os.O_WRONLY)):
        opened = os.open(path, mode)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = [MAIN_FILE, *request["argv"]]
    sys.path[0] = os.getcwd()
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
            request = json.loads(conn.makefile("rb").readline())
            pid = os.fork()
            if pid == 0:
                for other in (listener, conn, *waiting.values()):
                    other.close()
                for fd in (wake_r, wake_w):
                    os.close(fd)
                _child(request)
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
    return (os.environ.get("MAINBOARD_TEST_FORKSERVER", "1") != "0"
            and _interpreter_env(env) == _interpreter_env(os.environ))


def run_mainboard(args: Sequence[str], *, cwd: str | os.PathLike[str] | None = None,
                  env: Mapping[str, str] | None = None, input: str | None = None,
                  timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, -m, mainboard, *args], capture_output=True, text=True)``:
    the same result, from a child of this process's server when the environment allows."""
    argv = [sys.executable, "-m", "mainboard", *args]
    full_env = dict(os.environ if env is None else env)
    if not _use_server(full_env):
        return subprocess.run(argv, cwd=cwd, env=full_env, input=input, capture_output=True,
                              text=True, timeout=timeout)
    path = _ensure_server()
    with tempfile.TemporaryDirectory(prefix="mb-cli-run-") as folder:
        files = {name: os.path.join(folder, name) for name in ("stdin", "stdout", "stderr")}
        Path(files["stdin"]).write_text(input or "")
        for name in ("stdout", "stderr"):
            Path(files[name]).touch()
        request = {"argv": list(args), "cwd": os.path.abspath(cwd or os.getcwd()),
                   "env": full_env, **files}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            replies = conn.makefile("rb")
            pid = int(replies.readline().split()[1])
            conn.settimeout(timeout)
            try:
                line = replies.readline()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)  # the server reaps it; its answer goes unread
                raise subprocess.TimeoutExpired(argv, timeout or 0,
                                                Path(files["stdout"]).read_text(),
                                                Path(files["stderr"]).read_text()) from None
        code = int(line.split()[1])
        return subprocess.CompletedProcess(argv, code, Path(files["stdout"]).read_text(),
                                           Path(files["stderr"]).read_text())


if __name__ == "__main__":
    serve(sys.argv[1])
