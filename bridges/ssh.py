"""Commands and files on another machine over ssh (paramiko), one pooled connection per target.

Every SshTransport for the same target (host, port, user, identity, known_hosts,
trust) in this process shares one authenticated paramiko connection: a command costs
one channel, not one handshake.
Host keys are checked against known_hosts (OpenSSH format); a new key is accepted and
recorded only when the host says ``trust = "first-use"``, and a changed key is always
refused. Errors are mapped to HostUnreachable, AuthFailed and HostKeyMismatch with
messages that name the host and the fix, never a secret.
"""

from __future__ import annotations

import atexit
import getpass
import os
import posixpath
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import paramiko

from mainboard.bridges.hostkeys import check_unknown_key, mismatch_error
from mainboard.bridges.ssh_session import (
    PgidCatcher,
    drain,
    remote_script,
    remote_word,
    reporting_pgid,
    send_stdin,
    tilde_split,
)
from mainboard.bridges.transport import Command, Output, Transport, local_file
from mainboard.errors import AuthFailed, HostError, HostUnreachable, UserError

Trust = Literal["known-hosts", "first-use"]
_T = TypeVar("_T")
KEEPALIVE_S = 15


@dataclass
class _Pooled:
    """One shared paramiko client, the transports holding it, and a lock for (re)connecting."""

    client: paramiko.SSHClient | None = None
    users: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


_PoolKey = tuple[str, int, str, str | None, str, str]
_POOL: dict[_PoolKey, _Pooled] = {}
_POOL_LOCK = threading.Lock()


def _close_client(client: paramiko.SSHClient | None) -> None:
    if client is not None:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - closing a dead connection must not mask the real error
            pass


def close_all() -> None:
    """Close every pooled connection (at exit; tests use it to start from a clean pool)."""
    with _POOL_LOCK:
        entries = list(_POOL.values())
        _POOL.clear()
    for entry in entries:
        with entry.lock:
            _close_client(entry.client)
            entry.client = None


def _forget_after_fork() -> None:
    """A forked child (e.g. a prefork worker) must not share the parent's ssh sockets."""
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    _POOL.clear()


atexit.register(close_all)
os.register_at_fork(after_in_child=_forget_after_fork)


class SshTransport(Transport):
    """A host reached over ssh; cheap to create, connects on first use, thread-safe."""

    def __init__(self, host: str, *, port: int = 22, user: str | None = None,
                 identity: str | None = None, trust: Trust = "known-hosts",
                 known_hosts: str | None = None, connect_timeout: float = 10.0,
                 name: str | None = None) -> None:
        super().__init__(name or host)
        self.host, self.port = host, port
        self.user = user or getpass.getuser()
        self.identity = str(Path(identity).expanduser()) if identity else None
        self.trust: Trust = trust
        self.known_hosts = Path(known_hosts or "~/.ssh/known_hosts").expanduser()
        self.connect_timeout = connect_timeout
        # Everything that decides whether we may connect is in the key: a host entry with
        # another identity or host-key policy never borrows a connection it could not make.
        self._key: _PoolKey = (host, port, self.user, self.identity, str(self.known_hosts),
                               trust)
        self._holding = False

    @classmethod
    def from_params(cls, params: Any, name: str) -> SshTransport:
        """Build from a config ``SshParams`` (host, user, port, identity, trust, known_hosts...)."""
        return cls(params.host, port=params.port, user=params.user, identity=params.identity,
                   trust=params.trust, known_hosts=params.known_hosts,
                   connect_timeout=params.connect_timeout, name=name)

    @property
    def target(self) -> str:
        """``user@host:port`` for messages."""
        return f"{self.user}@{self.host}:{self.port}"

    # -- connection pool -------------------------------------------------------------------

    @property
    def paramiko_transport(self) -> paramiko.Transport:
        """The live pooled paramiko Transport, connecting if needed."""
        entry = self._entry()
        with entry.lock:
            transport = entry.client.get_transport() if entry.client else None
            if transport is None or not transport.is_active():
                _close_client(entry.client)
                entry.client = None
                entry.client = self._connect()
                transport = entry.client.get_transport()
            assert transport is not None
        return transport

    def _entry(self) -> _Pooled:
        with _POOL_LOCK:
            entry = _POOL.setdefault(self._key, _Pooled())
            if not self._holding:
                entry.users += 1
                self._holding = True
            return entry

    def _drop(self, dead: paramiko.Transport) -> None:
        """Forget a pooled connection that failed, unless another thread already replaced it."""
        entry = self._entry()
        with entry.lock:
            if entry.client is not None and entry.client.get_transport() is dead:
                _close_client(entry.client)
                entry.client = None

    def close(self) -> None:
        """Stop using the pooled connection; the last user to let go closes it."""
        with _POOL_LOCK:
            if not self._holding:
                return
            self._holding = False
            entry = _POOL.get(self._key)
            if entry is None:
                return
            entry.users -= 1
            if entry.users > 0:
                return
            del _POOL[self._key]
        with entry.lock:
            _close_client(entry.client)
            entry.client = None

    def _connect(self) -> paramiko.SSHClient:
        """One authenticated connection, with paramiko's errors turned into ours."""
        if self.identity:
            local_file(self.identity, f"{self.name}: identity file")
        client = paramiko.SSHClient()
        if self.known_hosts.is_file():
            client.load_system_host_keys(str(self.known_hosts))
        client.set_missing_host_key_policy(_UnknownKeyPolicy(self))
        try:
            client.connect(
                self.host, port=self.port, username=self.user, key_filename=self.identity,
                allow_agent=self.identity is None, look_for_keys=self.identity is None,
                timeout=self.connect_timeout, banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout, channel_timeout=self.connect_timeout)
        except BaseException as exc:
            # paramiko's handshake thread keeps the real cause when connect() reports a later one.
            started = client.get_transport()
            cause = exc
            if isinstance(exc, paramiko.SSHException | EOFError) and started is not None:
                cause = started.get_exception() or exc
            _close_client(client)
            raise self._translate(cause) from exc
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(KEEPALIVE_S)
        return client

    def _translate(self, exc: BaseException) -> BaseException:
        """Map a paramiko/socket failure to the mainboard error a user can act on."""
        where = f"{self.name}: cannot reach {self.host}:{self.port}"
        if isinstance(exc, HostError | UserError):
            return exc
        if isinstance(exc, paramiko.BadHostKeyException):
            return mismatch_error(self.name, self.host, self.port, exc.key, self.known_hosts)
        if isinstance(exc, paramiko.PasswordRequiredException):
            return AuthFailed(f"{self.name}: identity file {self.identity} is passphrase-protected; "
                              "load it into ssh-agent and drop `identity`, or use a key without one")
        if isinstance(exc, paramiko.AuthenticationException):
            tried = (f"identity file {self.identity}" if self.identity
                     else "ssh-agent and ~/.ssh/id_* keys (no `identity` set)")
            return AuthFailed(f"{self.name}: {self.target} refused authentication with {tried}; "
                              f"add its public key to ~{self.user}/.ssh/authorized_keys there "
                              "or set `identity` to the right key")
        if isinstance(exc, socket.gaierror):
            return HostUnreachable(f"{where}: name does not resolve ({exc.strerror})")
        if isinstance(exc, TimeoutError):
            return HostUnreachable(f"{where}: no answer within {self.connect_timeout:g}s "
                                   "(connect_timeout)")
        if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
            reasons = {e.strerror or str(e) for e in exc.errors.values()}
            return HostUnreachable(f"{where}: {'; '.join(sorted(reasons)).lower()}")
        if isinstance(exc, OSError):
            return HostUnreachable(f"{where}: {(exc.strerror or str(exc)).lower()}")
        if isinstance(exc, paramiko.SSHException) and (
                "banner" in str(exc) or "No existing session" in str(exc)):
            return HostUnreachable(f"{where}: no ssh handshake within {self.connect_timeout:g}s "
                                   "(connect_timeout; is an ssh server listening there?)")
        if isinstance(exc, paramiko.SSHException | EOFError):
            return HostUnreachable(f"{where}: ssh handshake failed ({exc or type(exc).__name__})")
        return exc

    def _on_live_transport(self, open_: Callable[[paramiko.Transport], _T],
                           failed: Callable[[BaseException], HostError]) -> _T:
        """Open something on the pooled connection; a dead one is dropped and replaced once,
        transparently, and only a second failure reaches the caller (as ``failed(exc)``)."""
        for attempt in (1, 2):
            transport = self.paramiko_transport
            try:
                return open_(transport)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                self._drop(transport)
                if attempt == 2:
                    raise failed(exc) from exc
        raise AssertionError("unreachable")

    def _channel(self) -> paramiko.Channel:
        """A fresh session channel; a dead pooled connection is replaced once, transparently."""
        return self._on_live_transport(
            lambda transport: transport.open_session(timeout=self.connect_timeout),
            lambda exc: HostUnreachable(f"{self.name}: connection to {self.host}:{self.port} "
                                        f"lost and reconnecting did not help ({exc})"))

    # -- commands ----------------------------------------------------------------------------

    def _execute(self, command: Command, text: str, env: dict[str, str],
                 cwd: str | os.PathLike[str] | None, stdin: bytes | None, output: Output,
                 timeout: float | None) -> int | None:
        script = reporting_pgid(remote_script(text, env, None if cwd is None else os.fspath(cwd)))
        sink = PgidCatcher(output)
        channel = self._channel()
        try:
            channel.exec_command(script)
            if stdin:
                threading.Thread(target=send_stdin, args=(channel, stdin), daemon=True).start()
            else:
                channel.shutdown_write()
            deadline = None if timeout is None else time.monotonic() + timeout
            if not drain(channel, sink, deadline):
                if sink.pgid is None:  # timed out before the shell even reported in
                    drain(channel, sink, time.monotonic() + self.connect_timeout,
                          lambda: sink.pgid is not None)
                self._kill_group(sink.pgid)
                return None
            code = channel.recv_exit_status()
            return 255 if code == -1 else code  # no exit-status (killed by a signal): as ssh does
        except KeyboardInterrupt:
            self._kill_group(sink.pgid)  # Ctrl-C here stops the command there too
            raise
        finally:
            channel.close()

    def _kill_group(self, pgid: int | None) -> None:
        """Kill a command's process group from a second channel (sshd only signals non-root
        sessions, and closing the channel does not stop a command without a tty)."""
        if not pgid:
            return
        channel = self._channel()
        try:
            channel.exec_command(f"kill -KILL -- -{pgid} 2>/dev/null")
            channel.shutdown_write()
            channel.status_event.wait(self.connect_timeout)
        finally:
            channel.close()

    # -- files -------------------------------------------------------------------------------

    def _sftp_path(self, remote: str) -> str:
        """SFTP starts in the login's home: ``~/x`` is ``x``; ``~user/x`` is asked of the shell."""
        user, rest = tilde_split(remote)
        if user is None:
            return remote
        if not user:
            return rest or "."
        return self.run(f"printf '%s' {remote_word(remote)}", check=True).stdout

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        source = local_file(local, "local file")
        with self._sftp() as sftp:
            target = self._sftp_path(remote)
            _sftp_makedirs(sftp, posixpath.dirname(target))
            sftp.put(str(source), target)
            sftp.chmod(target, stat.S_IMODE(source.stat().st_mode))

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        target = Path(local).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        with self._sftp() as sftp:
            try:
                sftp.get(self._sftp_path(remote), str(target))
            except FileNotFoundError as exc:
                raise UserError(f"{self.name}: remote file {remote} does not exist") from exc

    def _sftp(self) -> paramiko.SFTPClient:
        """An SFTP session; a dead pooled connection is replaced once, as for commands."""
        return self._on_live_transport(
            _open_sftp,
            lambda exc: HostError(f"{self.name}: cannot open SFTP on {self.host}:{self.port} "
                                  f"({exc}); is `Subsystem sftp` enabled in sshd_config?"))


def _open_sftp(transport: paramiko.Transport) -> paramiko.SFTPClient:
    sftp = paramiko.SFTPClient.from_transport(transport)
    assert sftp is not None
    return sftp


class _UnknownKeyPolicy(paramiko.RejectPolicy):
    """Refuse a host missing from known_hosts, unless the host trusts on first use."""

    def __init__(self, owner: SshTransport) -> None:
        self.owner = owner

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        o = self.owner
        check_unknown_key(o.name, o.host, o.port, key, o.known_hosts, o.trust == "first-use")


def _sftp_makedirs(sftp: paramiko.SFTPClient, directory: str) -> None:
    """``mkdir -p`` over SFTP (paths are never given to a shell)."""
    if directory in ("", ".", "/"):
        return
    try:
        sftp.stat(directory)
        return
    except FileNotFoundError:
        pass
    _sftp_makedirs(sftp, posixpath.dirname(directory))
    sftp.mkdir(directory)
