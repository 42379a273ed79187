"""Errors of the external-process layer (host side).

Like :mod:`mainboard.integrators.errors`, each keeps its constructor arguments in ``args``
so Celery can rebuild it as ``cls(*args)`` in another process.
"""

from __future__ import annotations

from mainboard.errors import MainboardError


class ProcessError(MainboardError):
    """An external process broke the protocol, a limit, or could not run: names the command."""

    def __init__(self, message: str, command: str = "", stderr_tail: str = "") -> None:
        super().__init__(message, command, stderr_tail)
        self.message, self.command, self.stderr_tail = message, command, stderr_tail

    def __str__(self) -> str:
        text = f"process `{self.command}`: {self.message}" if self.command else self.message
        if self.stderr_tail:
            text += f"\n--- process stderr (last lines) ---\n{self.stderr_tail}"
        return text


class ProcessProtocolError(ProcessError):
    """The process wrote something that is not a valid frame or response, or exceeded a limit."""


class ProcessTimeout(ProcessError):
    """The process did not answer within the per-request timeout and was killed."""


class ProcessCrashed(ProcessError):
    """The process exited (or closed its pipes) while the host waited for it."""

    def __init__(self, message: str, command: str = "", stderr_tail: str = "",
                 returncode: int | None = None) -> None:
        MainboardError.__init__(self, message, command, stderr_tail, returncode)
        self.message, self.command, self.stderr_tail = message, command, stderr_tail
        self.returncode = returncode


class ProcessRemoteError(ProcessError):
    """The process answered with a JSON-RPC error (an exception in user code): carries its traceback."""
