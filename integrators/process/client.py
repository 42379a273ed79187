"""Host side: one child process speaking the protocol, from spawn to shutdown.

Why this shape: a worker must survive whatever the child does. Every wait is bounded by
the request deadline (``framing``), stderr is drained by a thread so the child can never
block on a full pipe, and any response that breaks the protocol kills the child (the
stream can no longer be trusted) and raises a :class:`ProcessError` naming the command.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from mainboard.errors import (
    DeadlineExceeded,
    ProcessCrashed,
    ProcessError,
    ProcessProtocolError,
    ProcessRemoteError,
    ProcessTimeout,
    StreamClosed,
)
from mainboard.integrators.process.framing import FrameReader, tune_pipe, write_parts
from mainboard.integrators.process.wire import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_TERMINATE_GRACE,
    JSONRPC_VERSION,
    LOG_SENTINEL,
    MAX_BINARY_BYTES,
    MAX_JSON_BYTES,
    PROTOCOL,
    encode_frame,
)

LOG = logging.getLogger("mainboard.process")
TRACE = 5
LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "warning": logging.WARNING, "error": logging.ERROR}
TAIL_LINES = 40
_MAX_STDERR_LINE = 4096
_SECRET_NAME = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|API_?KEY|CREDENTIAL", re.I)
_URL_USERINFO = re.compile(r"(\w+://)[^/\s@]+@")


def _redactor(env: Mapping[str, str]) -> re.Pattern[str] | None:
    secrets = sorted({v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= 4},
                     key=len, reverse=True)
    return re.compile("|".join(re.escape(s) for s in secrets)) if secrets else None


class ProcessClient:
    """A child process: ``start``, ``initialize``, ``request`` (one at a time), ``close``."""

    def __init__(self, command: Sequence[str], *, role: str, cwd: str | Path | None = None,
                 env: Mapping[str, str] | None = None,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
                 terminate_grace: float = DEFAULT_TERMINATE_GRACE,
                 logger: logging.Logger = LOG, run_id: str = "") -> None:
        self.command = [str(part) for part in command]
        self.run_id = run_id  # tags every log record, so the run's log can take them in
        self.label = shlex.join(self.command)
        if len(self.label) > 200:
            self.label = self.label[:197] + "..."
        self.role, self.cwd = role, None if cwd is None else str(cwd)
        self.env = {**os.environ, **dict(env or {})}
        self.request_timeout, self.shutdown_grace = request_timeout, shutdown_grace
        self.terminate_grace, self.logger = terminate_grace, logger
        self._redact = _redactor(self.env)
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr_thread: threading.Thread | None = None
        self._reader: FrameReader | None = None
        self._owner = os.getpid()
        self._next_id = 0
        self._broken = ""
        self._exit: int | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the child in its own session (signals reach its children too)."""
        try:
            self._proc = subprocess.Popen(
                self.command, cwd=self.cwd, env=self.env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                start_new_session=True)
        except (OSError, ValueError) as exc:
            raise ProcessError(f"cannot start the {self.role} process (cwd "
                               f"{self.cwd or os.getcwd()}): {exc}", self.label) from None
        assert self._proc.stdin and self._proc.stdout and self._proc.stderr
        tune_pipe(self._proc.stdin.fileno())
        tune_pipe(self._proc.stdout.fileno())
        self._reader = FrameReader(self._proc.stdout.fileno(), self.label, self._stray)
        self._stderr_thread = threading.Thread(
            target=self._pump_stderr, args=(self._proc.stderr,),
            name=f"stderr-{self.role}-{self._proc.pid}", daemon=True)
        self._stderr_thread.start()

    @property
    def pid(self) -> int | None:
        """The child's pid while it is ours (None before start and after close)."""
        return None if self._proc is None else self._proc.pid

    @property
    def alive(self) -> bool:
        """Started, not broken by a protocol error, and still running."""
        return self._proc is not None and not self._broken and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """Exit code once the child has exited (negative: killed by that signal)."""
        return self._exit if self._proc is None else self._proc.poll()

    def close(self) -> None:
        """Close stdin, wait the grace period, then SIGTERM, then SIGKILL (each bounded)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if os.getpid() != self._owner:      # a forked copy must not touch the parent's child
            self._drop_fds(proc)
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()  # type: ignore[union-attr]
        for grace, sig in ((self.shutdown_grace, signal.SIGTERM),
                           (self.terminate_grace, signal.SIGKILL)):
            try:
                proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                self.logger.warning("[%s %s pid %d] still running %gs after stdin closed; "
                                    "sending %s", self.role, self.label, proc.pid, grace,
                                    sig.name)
                self._signal(proc, sig)
        self._exit = proc.wait()
        self._drop_fds(proc)
        assert self._stderr_thread is not None  # start() made it with the pipes
        self._stderr_thread.join(timeout=1.0)

    def forget_after_fork(self) -> None:
        """In a forked child: release our copies of the pipes without signalling anything."""
        proc, self._proc = self._proc, None
        if proc is not None:
            self._drop_fds(proc)

    @staticmethod
    def _drop_fds(proc: subprocess.Popen[bytes]) -> None:
        for stream in (proc.stdin, proc.stdout):  # both pipes: start() made them
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        """The child's whole group: it leads its own session (``start_new_session``), so the
        group is there while the child is; a group gone means the child is gone too."""
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, sig)

    def kill(self) -> None:
        """Kill the child's whole process group now (after a timeout or a protocol error)."""
        if self._proc is not None and self._proc.poll() is None:
            self._signal(self._proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5.0)

    def __enter__(self) -> ProcessClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- logs ----------------------------------------------------------------------------
    def _clean(self, text: str) -> str:
        text = _URL_USERINFO.sub(r"\1[REDACTED]@", text)
        return self._redact.sub("[REDACTED]", text) if self._redact else text

    def _emit(self, level: int, text: str) -> None:
        tag = f"{self.role} {self.label} pid {self.pid}"
        self.logger.log(level, "[%s] %s", tag, text, extra={"process_command": self.label,
                                                           "process_role": self.role,
                                                           "process_run": self.run_id})

    def _pump_stderr(self, stream: IO[bytes]) -> None:
        skipping = False
        for raw in iter(lambda: stream.readline(_MAX_STDERR_LINE), b""):
            complete = raw.endswith(b"\n")
            if skipping:
                skipping = not complete
                continue
            skipping = not complete and len(raw) >= _MAX_STDERR_LINE
            line = self._clean(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
            if skipping:
                line += " [line truncated]"
            parts = line.split("\t", 2)
            if parts[0] == LOG_SENTINEL and len(parts) == 3:
                level, line = LEVELS.get(parts[1].lower(), logging.INFO), parts[2]
            else:
                level = logging.WARNING
            self._tail.append(line)
            self._emit(level, line)
        with contextlib.suppress(OSError):
            stream.close()

    def _stray(self, text: str) -> None:
        self._emit(logging.WARNING, "stray stdout: " + self._clean(text))

    def stderr_tail(self) -> str:
        """The last stderr lines (waits briefly for the reader to drain a dead child's pipe)."""
        thread = self._stderr_thread
        if thread is not None and (self._proc is None or self._proc.poll() is not None):
            thread.join(timeout=1.0)
        return "\n".join(self._tail)

    # -- requests ------------------------------------------------------------------------
    def initialize(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The handshake; ``protocol`` and ``role`` are added. Returns the result (``ok``, metadata)."""
        result, _ = self.request("initialize", {"protocol": PROTOCOL, "role": self.role,
                                                **params})
        if result.get("ok") is not True:
            self.kill()
            raise ProcessProtocolError(f"initialize answered {result!r}; expected "
                                       "{\"ok\": true, ...}", self.label, self.stderr_tail())
        return result

    def request(self, method: str, params: Mapping[str, Any], binary: Any = b"",
                timeout: float | None = None) -> tuple[dict[str, Any], bytearray]:
        """Send one request and wait for its response: (result, binary block).

        ``binary`` is one buffer or a list of buffers sent end to end (no copy).
        """
        if self._proc is None or self._reader is None:
            raise ProcessError(f"{method}: the {self.role} process is not running", self.label)
        if self._broken:
            raise ProcessError(f"{method}: the process was killed earlier ({self._broken})",
                               self.label)
        if self._proc.poll() is not None:
            raise self._crashed(method, "before the request was sent")
        limit = self.request_timeout if timeout is None else timeout
        self._next_id += 1
        req_id = self._next_id
        message = {"jsonrpc": JSONRPC_VERSION, "id": req_id, "method": method,
                   "params": dict(params)}
        try:
            parts = encode_frame(message, binary)
        except (TypeError, ValueError) as exc:  # NaN, a non-JSON value, a strided buffer
            raise ProcessError(f"{method}: cannot encode the request ({exc}); nothing was "
                               "sent", self.label) from None
        sizes = (len(parts[0]), sum(len(p) for p in parts[1:]))
        if sizes[0] > MAX_JSON_BYTES + 512 or sizes[1] > MAX_BINARY_BYTES:
            raise ProcessError(f"{method}: the request ({sizes[0]} bytes of JSON, {sizes[1]} "
                               f"of binary) exceeds the frame limits ({MAX_JSON_BYTES} JSON, "
                               f"{MAX_BINARY_BYTES} binary); use smaller batches", self.label)
        deadline = time.monotonic() + limit
        try:
            write_parts(self._proc.stdin.fileno(), parts, deadline)  # type: ignore[union-attr]
            while True:
                response, blob = self._reader.read_message(deadline)
                if isinstance(response, dict) and "id" not in response and "method" in response:
                    self._emit(logging.DEBUG, f"notification {str(response)[:500]}")
                    continue
                return self._result(response, req_id, method), blob
        except StreamClosed as exc:
            raise self._crashed(method, exc.where) from None
        except DeadlineExceeded as exc:
            self._break(f"no answer to {method} within {limit:g}s")
            raise ProcessTimeout(f"did not answer {method} within {limit:g}s (the per-request "
                                 f"timeout; stuck {exc.where}); killed it", self.label,
                                 self.stderr_tail()) from None
        except ProcessProtocolError as exc:
            self._break(exc.message)
            raise ProcessProtocolError(f"{method}: {exc.message}; killed it", self.label,
                                       self.stderr_tail()) from None

    def _break(self, why: str) -> None:
        self._broken = why
        self.kill()

    def _result(self, response: Any, req_id: int, method: str) -> dict[str, Any]:
        def bad(why: str) -> ProcessProtocolError:
            return ProcessProtocolError(f"invalid response to request {req_id}: {why}",
                                        self.label)
        if not isinstance(response, dict):
            raise bad(f"expected a JSON object, got {type(response).__name__}")
        if response.get("jsonrpc") != JSONRPC_VERSION:
            raise bad(f'"jsonrpc" must be "2.0", got {response.get("jsonrpc")!r}')
        got = response.get("id")
        if got != req_id or isinstance(got, bool):
            raise bad(f"id {got!r} does not match the request id {req_id} (one request is in "
                      "flight at a time)")
        if ("result" in response) == ("error" in response):
            raise bad("a response needs exactly one of result or error, got "
                      f"{'both' if 'result' in response else 'neither'}")
        if "error" in response:
            error = response["error"]
            if not isinstance(error, dict) or not isinstance(error.get("message"), str):
                raise bad(f"error must be an object with a message, got {error!r}")
            trace = (error.get("data") or {}).get("traceback") if isinstance(
                error.get("data"), dict) else None
            text = f"{method} failed in the process: {self._clean(error['message'])}"
            if trace:
                text += "\n" + self._clean(str(trace)).rstrip()
            raise ProcessRemoteError(text, self.label)
        result = response["result"]
        if not isinstance(result, dict):
            raise bad(f"result must be a JSON object, got {type(result).__name__}")
        return result

    def _crashed(self, method: str, where: str) -> ProcessCrashed:
        proc = self._proc
        assert proc is not None
        try:
            code: int | None = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self._break("closed stdout but kept running")
            code = proc.poll()
            how = "closed its stdout without exiting (killed it)"
        else:
            assert code is not None
            how = f"exited with code {code}"
            if code < 0:
                with contextlib.suppress(ValueError):
                    how = f"was killed by signal {signal.Signals(-code).name} (code {code})"
        return ProcessCrashed(f"{how} during {method} ({where})", self.label,
                              self.stderr_tail(), code)
