"""``subprocess.Popen``'s face for a command the suite's fork server started
(tests/support/cliserver.py): the child is the server's, not ours, so its end arrives as a
line on the request's socket instead of through ``waitpid``; signals go to its pid as
``Popen.send_signal`` sends them."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import IO, Any


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (a ``time.monotonic()`` value), None for no deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


class _Replies:
    """The server's answer lines on one connection, read with a timeout."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buffer = conn, b""

    def line(self, timeout: float | None) -> bytes | None:
        """The next line, or None when ``timeout`` passed first."""
        deadline = _deadline(timeout)
        while b"\n" not in self.buffer:
            if not select.select([self.conn], [], [], _left(deadline))[0]:
                return None
            chunk = self.conn.recv(4096)
            if not chunk:
                raise ConnectionError("tests/support/cliserver.py: the fork server went away "
                                      "before the command ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


class ServedProcess:
    """A running command: ``pid``, ``stdin``/``stdout``/``stderr`` (the pipes asked for),
    ``poll``, ``wait``, ``communicate``, ``send_signal``/``terminate``/``kill``,
    ``returncode`` (negative for a signal), and ``with`` as for ``Popen``."""

    def __init__(self, args: Sequence[str], conn: socket.socket,
                 streams: tuple[IO[Any] | None, IO[Any] | None, IO[Any] | None]) -> None:
        self.args = list(args)
        self._conn, self._replies = conn, _Replies(conn)
        self.stdin, self.stdout, self.stderr = streams
        self.returncode: int | None = None
        self._readers: dict[str, tuple[threading.Thread, list[Any]]] = {}
        first = self._replies.line(None)
        assert first is not None and first.startswith(b"pid "), first
        self.pid = int(first.split()[1])

    def poll(self) -> int | None:
        """The exit code once the command has ended, else None."""
        if self.returncode is None:
            self._take(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; ``subprocess.TimeoutExpired`` after ``timeout`` s."""
        if self.returncode is None and not self._take(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def _take(self, timeout: float | None) -> bool:
        line = self._replies.line(timeout)
        if line is None:
            return False
        self.returncode = int(line.split()[1])
        self._conn.close()
        return True

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: Any = None, timeout: float | None = None
                    ) -> tuple[Any, Any]:
        """Write ``input``, read both pipes to their end, wait: as ``Popen.communicate``
        (after a ``TimeoutExpired`` a second call goes on where the first stopped)."""
        deadline = _deadline(timeout)
        if self.stdin is not None and not self.stdin.closed:
            try:
                if input:
                    self.stdin.write(input)
                self.stdin.close()
            except BrokenPipeError:
                pass
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None and name not in self._readers:
                got: list[Any] = []
                reader = threading.Thread(target=lambda s=stream, g=got: g.append(s.read()),
                                          daemon=True)
                reader.start()
                self._readers[name] = (reader, got)
        out = []
        for name in ("stdout", "stderr"):
            if name not in self._readers:
                out.append(None)
                continue
            reader, got = self._readers[name]
            reader.join(_left(deadline))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            out.append(got[0])
            getattr(self, name).close()
        self.wait(_left(deadline))
        return out[0], out[1]

    def __enter__(self) -> ServedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr, self.stdin):
            if stream is not None:
                stream.close()
        self.wait()
