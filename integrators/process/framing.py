"""Host-side frame I/O on raw pipe descriptors, with every protocol limit and a deadline.

Why raw descriptors and ``poll``: a buffered ``read`` on a pipe blocks until the child
writes, so a hung process would hang the worker. Every wait here is bounded by the
request deadline, every length is checked against its limit before any allocation, and
large binary blocks are read straight into their final buffer (no intermediate copies).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import time
from collections.abc import Callable
from typing import Any

from mainboard.errors import DeadlineExceeded, ProcessProtocolError, StreamClosed
from mainboard.integrators.process.wire import (
    BINARY_LENGTH,
    CONTENT_LENGTH,
    MAX_BINARY_BYTES,
    MAX_HEADER_LINE_BYTES,
    MAX_JSON_BYTES,
    MAX_STRAY_STDOUT_BYTES,
    split_header,
)

_READ_CHUNK = 1 << 20
_PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def tune_pipe(fd: int) -> None:
    """Grow the pipe to 1 MiB where the OS allows (fewer wake-ups per batch); set O_NONBLOCK."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)
    os.set_blocking(fd, False)


def _wait(fd: int, event: int, deadline: float, where: str) -> None:
    poller = select.poll()
    poller.register(fd, event)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded(where)
        if poller.poll(max(1, int(remaining * 1000) + 1)):
            return


def write_parts(fd: int, buffers: list[Any], deadline: float) -> None:
    """Write an encoded frame to a non-blocking pipe; a child that stops reading cannot block us."""
    parts = [memoryview(p).cast("B") for p in buffers]
    while parts:
        _wait(fd, select.POLLOUT, deadline, "writing the request")
        try:
            written = os.writev(fd, parts)
        except BlockingIOError:  # ready, yet would block
            continue
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise StreamClosed("writing the request (stdin closed)") from exc
        while parts and written >= len(parts[0]):
            written -= len(parts[0])
            parts.pop(0)
        if parts and written:
            parts[0] = parts[0][written:]


class FrameReader:
    """Reads response frames from the child's stdout; stray text lines go to ``on_stray``."""

    def __init__(self, fd: int, command: str, on_stray: Callable[[str], None]) -> None:
        self._fd = fd
        self._command = command
        self._on_stray = on_stray
        self._buf = bytearray()

    def _fill(self, deadline: float, where: str) -> None:
        _wait(self._fd, select.POLLIN, deadline, where)
        try:
            chunk = os.read(self._fd, _READ_CHUNK)
        except BlockingIOError:  # ready, yet would block
            return
        except OSError as exc:  # EINTR is retried by Python itself (PEP 475)
            raise StreamClosed(f"{where} ({exc})") from exc
        if not chunk:
            raise StreamClosed(where)
        self._buf += chunk

    def _violation(self, message: str) -> ProcessProtocolError:
        return ProcessProtocolError(message, self._command)

    def _read_line(self, deadline: float, where: str) -> bytes:
        scanned = 0
        while True:
            nl = self._buf.find(b"\n", scanned)
            if nl >= 0:
                if nl + 1 > MAX_HEADER_LINE_BYTES:
                    break
                line = bytes(self._buf[:nl + 1])
                del self._buf[:nl + 1]
                return line
            if len(self._buf) > MAX_HEADER_LINE_BYTES:
                break
            scanned = len(self._buf)
            self._fill(deadline, where)
        raise self._violation(
            f"a line on stdout is longer than the header line limit of "
            f"{MAX_HEADER_LINE_BYTES} bytes ({where}); stdout carries frames only")

    def _read_exact(self, size: int, deadline: float, where: str) -> bytearray:
        out = bytearray(size)
        got = min(size, len(self._buf))
        out[:got] = self._buf[:got]
        del self._buf[:got]
        view = memoryview(out)
        while got < size:
            _wait(self._fd, select.POLLIN, deadline, where)
            try:
                count = os.readv(self._fd, [view[got:]])
            except BlockingIOError:  # ready, yet would block
                continue
            if count == 0:
                raise StreamClosed(f"{where} ({got} of {size} bytes received)")
            got += count
        return out

    def _length(self, name: str, value: str, limit: int, what: str) -> int:
        if not value.isdigit():
            raise self._violation(f"bad frame header {name}: {value!r} (must be a "
                                  "non-negative integer)")
        size = int(value)
        if size > limit:
            raise self._violation(f"{name} {size} exceeds the {what} limit of {limit} bytes")
        return size

    def _read_header(self, deadline: float) -> tuple[int, int]:
        stray = 0
        while True:
            try:
                line = self._read_line(deadline, "waiting for a response frame")
            except StreamClosed:
                if self._buf:
                    raise StreamClosed("inside a partial line on stdout") from None
                raise
            header = split_header(line)
            if header is not None and header[0] == CONTENT_LENGTH:
                break
            stray += len(line)
            if stray > MAX_STRAY_STDOUT_BYTES:
                raise self._violation(
                    f"more than {MAX_STRAY_STDOUT_BYTES} bytes of stray stdout before a "
                    "frame (the 64 KiB limit); stdout carries frames only, write logs to stderr")
            text = line.decode("utf-8", errors="replace").rstrip("\r\n")
            if text.strip():
                self._on_stray(text)
        json_len = self._length("Content-Length", header[1], MAX_JSON_BYTES, "JSON")
        binary_len = 0
        while True:
            line = self._read_line(deadline, "inside a frame header")
            if not line.strip():
                return json_len, binary_len
            header = split_header(line)
            if header is None:
                raise self._violation(f"bad frame header line {line[:200]!r} "
                                      "(expected 'Name: value' or a blank line)")
            if header[0] == BINARY_LENGTH:
                binary_len = self._length("Binary-Length", header[1], MAX_BINARY_BYTES,
                                          "binary")

    def read_message(self, deadline: float) -> tuple[Any, bytearray]:
        """One frame: (decoded JSON, binary block). Raises on any violation, EOF or deadline."""
        json_len, binary_len = self._read_header(deadline)
        body = self._read_exact(json_len, deadline, "inside a frame's JSON payload")
        try:
            message = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            preview = bytes(body[:200]).decode("utf-8", errors="replace")
            raise self._violation(f"frame payload is not valid JSON ({exc}); is Content-Length "
                                  f"({json_len}) right? payload starts {preview!r}") from None
        binary = self._read_exact(binary_len, deadline, "inside a frame's binary block")
        return message, binary
