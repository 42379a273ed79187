"""Run commands and copy files on one machine: the narrow base every bridge builds on.

A Transport knows how to reach a machine (this one, or another over ssh) but nothing
about mainboard.toml. A ``str`` command is shell text, run by the shell as-is; a list
command is an argv, quoted with ``shlex.join`` so no element is ever re-parsed. Output
is captured and, with ``stream``, forwarded live as it arrives.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from mainboard.errors import CommandFailed, CommandTimeout, UserError

StreamName = Literal["stdout", "stderr"]
StreamSink = Callable[[StreamName, str], None]
Command = str | Sequence[str]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Completed:
    """What a finished command left behind; ``command`` is the text the user asked for."""

    command: str
    host: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.returncode == 0

    def check(self) -> Completed:
        """Return self, or raise CommandFailed (command, code, stderr tail) when not ok."""
        if not self.ok:
            raise CommandFailed(self.command, self.returncode, self.stdout, self.stderr, self.host)
        return self


def command_text(command: Command) -> str:
    """The shell text for ``command``: a str as-is, a list joined with shlex.join."""
    if isinstance(command, str):
        text = command
    elif isinstance(command, bytes):
        raise UserError("a command must be a str (shell text) or a list of arguments, not bytes")
    else:
        text = shlex.join(os.fspath(arg) for arg in command)
    if not text.strip():
        raise UserError("empty command: give shell text or a non-empty list of arguments")
    return text


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Validate environment names (they end up in shell text) and stringify values."""
    checked: dict[str, str] = {}
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise UserError(f"environment variable name {name!r} is not valid; "
                            "valid: letters, digits and _, not starting with a digit")
        checked[name] = str(value)
    return checked


def _console(name: StreamName, text: str) -> None:
    """Default live sink: our own stdout/stderr, flushed so output appears as it comes."""
    target = sys.stdout if name == "stdout" else sys.stderr
    target.write(text)
    target.flush()


class Output:
    """Collects a command's two streams as bytes arrive and forwards decoded text live."""

    def __init__(self, stream: bool | StreamSink = False) -> None:
        self._sink: StreamSink | None = _console if stream is True else (stream or None)
        self._chunks: dict[StreamName, list[bytes]] = {"stdout": [], "stderr": []}
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace")
                          for name in self._chunks}
        self._lock = threading.Lock()
        self.sink_error: Exception | None = None

    def feed(self, name: StreamName, data: bytes) -> None:
        """Record one chunk; a multi-byte character split across chunks is held back."""
        if not data:
            return
        with self._lock:
            self._chunks[name].append(data)
            if self._sink is not None:
                text = self._decoders[name].decode(data)
                if text:
                    self._forward(name, text)

    def _forward(self, name: StreamName, text: str) -> None:
        """Call the sink; if it fails (e.g. a closed pipe), stop forwarding but keep capturing,
        so the command is never left blocked on a full pipe. The error is raised at the end."""
        assert self._sink is not None
        try:
            self._sink(name, text)
        except Exception as exc:  # noqa: BLE001 - re-raised by Transport.run once the command ends
            self.sink_error = exc
            self._sink = None

    def text(self) -> tuple[str, str]:
        """Flush the live sink and return (stdout, stderr) decoded as UTF-8."""
        with self._lock:
            if self._sink is not None:
                for name, decoder in self._decoders.items():
                    tail = decoder.decode(b"", final=True)
                    if tail and self._sink is not None:
                        self._forward(name, tail)
            stdout, stderr = (b"".join(self._chunks[n]).decode("utf-8", "replace")
                              for n in ("stdout", "stderr"))
            return stdout, stderr


class Transport(ABC):
    """Runs commands and copies files on one machine; subclasses supply ``_execute``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, command: Command, *, check: bool = False, timeout: float | None = None,
            env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
            stdin: bytes | None = None, stream: bool | StreamSink = False) -> Completed:
        """Run ``command`` and wait for it.

        ``cwd`` is created when missing. ``env`` adds to the login environment.
        ``stream=True`` copies output to our stdout/stderr as it arrives; a callable
        receives ``(stream_name, text)`` chunks. ``timeout`` kills the command and
        raises CommandTimeout; ``check=True`` raises CommandFailed on a non-zero exit.
        """
        text = command_text(command)
        variables = check_env(env)
        if timeout is not None and timeout <= 0:
            raise UserError(f"timeout must be a positive number of seconds (got {timeout!r})")
        output = Output(stream)
        code = self._execute(command, text, variables, cwd, stdin, output, timeout)
        stdout, stderr = output.text()
        if output.sink_error is not None:
            raise output.sink_error
        if code is None:
            raise CommandTimeout(text, timeout or 0.0, stdout, stderr, self.name)
        done = Completed(text, self.name, code, stdout, stderr)
        return done.check() if check else done

    @abstractmethod
    def _execute(self, command: Command, text: str, env: dict[str, str],
                 cwd: str | os.PathLike[str] | None, stdin: bytes | None, output: Output,
                 timeout: float | None) -> int | None:
        """Run one command, feeding ``output``; return its exit code, or None on timeout."""

    @abstractmethod
    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        """Copy the local file ``local`` to ``remote`` on this machine (parents created)."""

    @abstractmethod
    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        """Copy ``remote`` on this machine to the local file ``local`` (parents created)."""

    def close(self) -> None:
        """Release what this transport holds; it may be used again afterwards."""
        return None

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def local_file(path: str | os.PathLike[str], what: str) -> Path:
    """An existing local regular file, or a UserError naming it."""
    found = Path(path).expanduser()
    if not found.is_file():
        state = "is a directory" if found.is_dir() else "does not exist"
        raise UserError(f"{what} {found} {state}; give the path of a regular file")
    return found


def _pump(pipe: IO[bytes], name: StreamName, output: Output) -> None:
    """Copy one pipe into ``output`` chunk by chunk until EOF (runs in a thread)."""
    fd = pipe.fileno()
    while chunk := os.read(fd, 65536):
        output.feed(name, chunk)
    pipe.close()


def _feed_stdin(pipe: IO[bytes], data: bytes) -> None:
    """Write stdin in a thread so a child that writes before it reads cannot deadlock us."""
    try:
        pipe.write(data)
    except BrokenPipeError:
        pass
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """TERM, then KILL, the command's whole process group (it runs in its own session):
    until the group is empty, not only its shell (a shell's children outlive it)."""
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.05)  # reap the leader, so only live members keep the group
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


@contextlib.contextmanager
def _ctrl_c_deferred() -> Iterator[list[int]]:
    """SIGINT noted in the yielded list instead of raised (main thread only: elsewhere
    Python delivers no KeyboardInterrupt anyway). The command exec'd meanwhile gets the
    default disposition back, as exec resets caught signals."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


class LocalTransport(Transport):
    """This machine, via subprocess: shell text through /bin/sh, argv lists exec'd directly."""

    def __init__(self, name: str = "local") -> None:
        super().__init__(name)

    def _execute(self, command: Command, text: str, env: dict[str, str],
                 cwd: str | os.PathLike[str] | None, stdin: bytes | None, output: Output,
                 timeout: float | None) -> int | None:
        workdir = None
        if cwd is not None:
            workdir = Path(cwd).expanduser()
            workdir.mkdir(parents=True, exist_ok=True)
        args: str | list[str] = text if isinstance(command, str) else [
            os.fspath(a) for a in command]
        # Ctrl-C is noted, not raised, while the command starts: one raised inside Popen (the
        # command already running, `proc` not yet ours) would leave it running in its session.
        with _ctrl_c_deferred() as pressed:
            try:
                proc = subprocess.Popen(
                    args, shell=isinstance(args, str), cwd=workdir, env={**os.environ, **env},
                    stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
                failed: OSError | None = None
            except (FileNotFoundError, PermissionError) as exc:
                failed = exc
        if failed is not None:
            # What a shell would say and return, so argv and text commands fail alike.
            missing = isinstance(failed, FileNotFoundError)
            output.feed("stderr", f"{args[0]}: "
                        f"{'command not found' if missing else failed.strerror}\n".encode())
            return 127 if missing else 126
        threads = [threading.Thread(target=_pump, args=(proc.stdout, "stdout", output), daemon=True),
                   threading.Thread(target=_pump, args=(proc.stderr, "stderr", output), daemon=True)]
        if stdin is not None:
            threads.append(threading.Thread(target=_feed_stdin, args=(proc.stdin, stdin),
                                            daemon=True))
        try:  # a Ctrl-C noted while it started is raised here, where it stops the command
            if pressed:
                raise KeyboardInterrupt
            for thread in threads:
                thread.start()
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            for thread in threads:
                thread.join(5.0)
            return None
        except BaseException:
            _kill_group(proc)  # Ctrl-C: the command is in its own session, so stop it here
            raise
        for thread in threads:
            thread.join()
        return proc.returncode

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        source = local_file(local, "local file")
        target = Path(remote).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        source = local_file(remote, f"file on {self.name}:")
        target = Path(local).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
