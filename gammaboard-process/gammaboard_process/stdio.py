"""Process side of the wire: framed stdio, ``log()`` and the ``print()`` capture.

Standard library and numpy only. stdout belongs to the protocol, so on start the real
stdout descriptor is duplicated for frames and descriptor 1 is pointed at stderr: a stray
``print()`` (Python) or ``printf`` (a C extension) can never corrupt a frame.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, BinaryIO

from gammaboard_process.wire import LOG_LEVELS, LOG_SENTINEL, encode_frame, split_header

_ALIASES = {"warning": "warn", "err": "error", "critical": "error", "fatal": "error"}
_lock = threading.Lock()
LEVEL_ENV = "GAMMABOARD_LOG_LEVEL"
_warned: set[str] = set()


def _level(level: str) -> str:
    name = _ALIASES.get(str(level).lower(), str(level).lower())
    return name if name in LOG_LEVELS else "info"


def _floor() -> int:
    """The rank below which ``log`` drops lines: ``$GAMMABOARD_LOG_LEVEL``, 0 (all) when
    unset; a value that is no level says so once, on the host's log, and keeps all."""
    raw = os.environ.get(LEVEL_ENV, "")
    name = _ALIASES.get(raw.lower(), raw.lower())
    if name in LOG_LEVELS or not raw:
        return LOG_LEVELS.index(name) if raw else 0
    if raw not in _warned:
        _warned.add(raw)
        _emit("warn", f"{LEVEL_ENV}={raw!r} is not a log level; valid: "
                      f"{', '.join(LOG_LEVELS)}; logging every level")
    return 0


def log(message: object, level: str = "info") -> None:
    """Send ``message`` to the host's log at ``level`` (trace, debug, info, warn, error).

    Lines below ``$GAMMABOARD_LOG_LEVEL`` (default: none) are dropped here, as gammaboard's
    helper does, so a chatty process can be quietened without editing it."""
    name = _level(level)
    if LOG_LEVELS.index(name) >= _floor():
        _emit(name, message)


def _emit(name: str, message: object) -> None:
    data = "".join(f"{LOG_SENTINEL}\t{name}\t{line}\n" for line in str(message).split("\n"))
    with _lock:
        _write_all(2, data.encode("utf-8", errors="replace"))


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while len(view):
        view = view[os.write(fd, view):]


class PrintCapture:
    """A text stream that turns ``print()`` output into ``log(..., level)`` lines."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, level: str = "info") -> None:
        self._level = level
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            done, _, self._pending = self._pending.rpartition("\n")
            log(done, self._level)
        return len(text)

    def flush(self) -> None:
        if self._pending:
            log(self._pending, self._level)
            self._pending = ""

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return 2


def _json_default(value: Any) -> Any:
    """numpy scalars and arrays in user results (snapshots, diagnostics, metadata) -> JSON."""
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class StdioChannel:
    """Reads request frames from stdin and writes response frames to the private stdout."""

    def __init__(self, stdin: BinaryIO | None = None) -> None:
        self._out = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = PrintCapture("info")
        self._in = stdin if stdin is not None else sys.stdin.buffer

    def _read_exact(self, size: int) -> bytearray:
        out = bytearray(size)
        view = memoryview(out)
        got = 0
        while got < size:
            count = self._in.readinto(view[got:])
            if not count:
                raise EOFError(f"stdin closed inside a frame ({got} of {size} bytes)")
            got += count
        return out

    def read(self) -> tuple[Any, bytearray] | None:
        """The next request (JSON, binary) or None when the host closed stdin."""
        json_len: int | None = None
        binary_len = 0
        while True:
            line = self._in.readline(65536)
            if not line:
                if json_len is None:
                    return None
                raise EOFError("stdin closed inside a frame header")
            header = split_header(line)
            if header is None:
                if json_len is not None and not line.strip():
                    break
                continue
            if header[0] == "content-length":
                json_len = int(header[1])
            elif header[0] == "binary-length":
                binary_len = int(header[1])
        body = self._read_exact(json_len)
        return json.loads(body), self._read_exact(binary_len)

    def send(self, message: dict[str, Any], binary: bytes | memoryview = b"") -> None:
        """Encode (refusing NaN in JSON) and write one frame; raises before writing on bad JSON."""
        parts = encode_frame(message, binary, default=_json_default)
        with _lock:
            for part in parts:
                _write_all(self._out, part)
