"""The far side of one ssh session: shell text for the login shell, and pumping its channel.

Kept apart from the connection pool (bridges/ssh.py) so the quoting rules, the part
that must be right for hostile names, can be read in one place.
"""

from __future__ import annotations

import re
import select
import shlex
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from mainboard.bridges.transport import Output, StreamName
from mainboard.names import lazy

if TYPE_CHECKING:  # the channel comes from bridges/ssh.py, which loaded paramiko already
    import paramiko

_TILDE = re.compile(r"~([A-Za-z0-9._-]*)(?:/|\Z)")
PGID_TAG = "mainboard-pgid="


def tilde_split(path: str) -> tuple[str | None, str]:
    """("" for ``~``, "user" for ``~user``, or None without a tilde; the rest of the path)."""
    match = _TILDE.match(path)
    if not match:
        return None, path
    return match.group(1), path[match.end():].strip("/")


def remote_word(path: str) -> str:
    """One shell word for a remote path: a leading ``~``/``~user`` expands, the rest is quoted."""
    user, rest = tilde_split(path)
    if user is None:
        return shlex.quote("./" + path if path.startswith("-") else path)
    head = "~" + user if user else '"$HOME"'
    return head + ("/" + shlex.quote(rest) if rest else "")


def remote_script(text: str, env: dict[str, str], cwd: str | None) -> str:
    """Shell text the login shell runs: enter (creating) ``cwd``, export ``env``, then ``text``.

    ``text`` is the user's own shell text and goes last, on its own line, untouched.
    """
    lines = []
    if cwd is not None:
        word = remote_word(cwd)
        lines.append(f"cd {word} 2>/dev/null || {{ mkdir -p {word} && cd {word}; }} || exit 125")
    lines.extend(f"export {name}={shlex.quote(value)}" for name, value in env.items())
    return "\n".join([*lines, text])


def reporting_pgid(script: str) -> str:
    """``script`` after a stderr line giving the login shell's pid: sshd made that shell a
    session (and process-group) leader, so it names the group to kill on timeout/Ctrl-C."""
    return f"printf '{PGID_TAG}%s\\n' \"$$\" >&2\n{script}"


class Sink(Protocol):
    """Where channel output goes: an Output, or a PgidCatcher in front of one."""

    def feed(self, name: StreamName, data: bytes) -> None: ...


class PgidCatcher:
    """Takes the shell's pid off the front of stderr, passing everything else through."""

    def __init__(self, output: Output) -> None:
        self.output = output
        self.pgid: int | None = None
        self._head = b""

    def feed(self, name: StreamName, data: bytes) -> None:
        if name == "stderr" and self.pgid is None:
            self._head += data
            line, newline, rest = self._head.partition(b"\n")
            if not newline:
                return
            value = line.decode(errors="replace").removeprefix(PGID_TAG)
            self.pgid = int(value) if value.isdigit() else 0
            data = rest if value.isdigit() else self._head
        self.output.feed(name, data)


def drain(channel: paramiko.Channel, output: Sink, deadline: float | None,
          stop: Callable[[], bool] | None = None) -> bool:
    """Copy both streams into ``output`` until EOF (or ``stop()``); False when ``deadline`` passes."""
    while stop is None or not stop():
        while channel.recv_ready():
            output.feed("stdout", channel.recv(65536))
        while channel.recv_stderr_ready():
            output.feed("stderr", channel.recv_stderr(65536))
        if (channel.eof_received or channel.closed) and not (
                channel.recv_ready() or channel.recv_stderr_ready()):
            return True
        wait = 1.0
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                return False
        select.select([channel], [], [], min(wait, 1.0))
    return True


def send_stdin(channel: paramiko.Channel, data: bytes) -> None:
    """Send stdin then EOF, in a thread so a command that writes first cannot deadlock us."""
    try:
        channel.sendall(data)
        channel.shutdown_write()
    except (OSError, lazy("paramiko").SSHException):
        pass
