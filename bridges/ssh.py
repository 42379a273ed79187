"""Commands and files on another machine over ssh (paramiko), one pooled connection per route.

Where a host is comes from mainboard.toml, then ``~/.ssh/config`` (bridges/ssh_route.py):
an alias there resolves as ``ssh alias`` would, jump hosts (``ProxyJump``) included.
A jump route is a chain of paramiko connections: each next server is reached through a
``direct-tcpip`` channel of the previous one, and its ssh session runs over that channel.
Every SshTransport for the same route (target, jumps, keys, known_hosts, trust) in this
process shares one authenticated connection: a command costs one channel, not one handshake.
Host keys of the target and of every jump host are checked against known_hosts (OpenSSH
format); a new key is accepted and recorded only when the host says ``trust =
"first-use"``, and a changed key is always refused. Errors are mapped to HostUnreachable,
AuthFailed and HostKeyMismatch with messages that name the host and the fix, never a secret.
"""

from __future__ import annotations

import atexit
import getpass
import logging
import os
import posixpath
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import paramiko

from mainboard.bridges.hostkeys import check_unknown_key, mismatch_error
from mainboard.bridges.ssh_route import DEFAULT_TIMEOUT_S, Hop, Route, resolve
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
# paramiko's own threads log a handshake cut short (a host still silent when a listing's
# time budget ran out and the process exits) as a traceback through logging's last resort.
# Its errors reach users as our one-line HostErrors; handlers set on the root (a daemon's
# log) still get its records.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
_T = TypeVar("_T")
KEEPALIVE_S = 15
# mainboard.toml's defaults: a value equal to one of them may be a default, not a choice
# (when the caller cannot say which keys were written), so the ssh config may fill it.
_DEFAULTS: dict[str, object] = {"port": 22, "identity": None, "connect_timeout": 10.0,
                                "known_hosts": os.path.expanduser("~/.ssh/known_hosts")}


@dataclass
class _Pooled:
    """One shared connection chain (jump hosts first, the target last), the transports
    holding it, and a lock for (re)connecting."""

    clients: list[paramiko.SSHClient] = field(default_factory=list)
    users: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def client(self) -> paramiko.SSHClient | None:
        """The target's client (the last of the chain), if connected."""
        return self.clients[-1] if self.clients else None

    def close(self) -> None:
        """Close the target first, then each jump host back towards us."""
        for client in reversed(self.clients):
            _close_client(client)
        self.clients = []


_PoolKey = tuple[Hop, tuple[Hop, ...], str | None, str, str]
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
            entry.close()


def _forget_after_fork() -> None:
    """A forked child (e.g. a prefork worker) must not share the parent's ssh sockets."""
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    _POOL.clear()


atexit.register(close_all)
os.register_at_fork(after_in_child=_forget_after_fork)


def _given(params: Any, names: Sequence[str] | None) -> dict[str, Any]:
    """The SshParams values mainboard.toml gave; the ssh config fills the others.

    ``names`` are the keys written in mainboard.toml (``model_fields_set``); without
    them (``params.given`` when the config provides it), a value equal to the default
    counts as not given.
    """
    if names is None:
        names = getattr(params, "given", None)
    out: dict[str, Any] = {}
    for key in ("port", "user", "identity", "known_hosts", "connect_timeout"):
        value = getattr(params, key)
        if names is not None:
            keep = key in names
        elif key == "user":
            keep = value is not None and value != _local_user()
        else:
            keep = value != _DEFAULTS[key]
        out[key] = value if keep else None
    return out


def _local_user() -> str:
    return getpass.getuser()


class SshTransport(Transport):
    """A host reached over ssh; cheap to create, connects on first use, thread-safe.

    Arguments given win over the user's ssh config (``ssh_config``: a path, ``none``,
    or None for ``$MAINBOARD_SSH_CONFIG`` / ``~/.ssh/config``); ``jump`` is a ProxyJump
    value (``none``: connect directly) or hops already resolved.
    """

    def __init__(self, host: str, *, port: int | None = None, user: str | None = None,
                 identity: str | None = None, trust: Trust = "known-hosts",
                 known_hosts: str | os.PathLike[str] | None = None,
                 connect_timeout: float | None = None, name: str | None = None,
                 jump: str | Sequence[Hop] | None = None,
                 ssh_config: str | os.PathLike[str] | None = None) -> None:
        super().__init__(name or host)
        route = resolve(host, port=port, user=user, identity=identity, known_hosts=known_hosts,
                        connect_timeout=connect_timeout, jump=jump, ssh_config=ssh_config)
        self._setup(host, route, trust)

    def _setup(self, alias: str, route: Route, trust: Trust) -> None:
        self.alias = alias  # the name asked for (maybe an ssh config alias)
        self.route = route
        self.trust: Trust = trust
        self.connect_timeout = route.connect_timeout
        self._held: _PoolKey | None = None

    @classmethod
    def from_params(cls, params: Any, name: str, *, given: Sequence[str] | None = None,
                    ssh_config: str | os.PathLike[str] | None = None) -> SshTransport:
        """Build from a config ``SshParams``; ``given`` names the keys mainboard.toml wrote
        (those win over the ssh config; the rest come from it, then from defaults)."""
        return cls(params.host, trust=params.trust, name=name, ssh_config=ssh_config,
                   **_given(params, given))

    def describe(self) -> dict[str, Any]:
        """Everything needed to reach this host again from another process (paths, no
        secrets), with the route already resolved: see ``from_description``."""
        t = self.route.target
        return {"host": t.host, "port": t.port, "user": t.user, "identity": self.identity,
                "identities": list(t.identities), "agent": t.agent, "trust": self.trust,
                "known_hosts": str(self.known_hosts), "connect_timeout": self.connect_timeout,
                "jumps": [{**asdict(h), "identities": list(h.identities)}
                          for h in self.route.jumps],
                "proxy_command": self.route.proxy_command}

    @classmethod
    def from_description(cls, data: Mapping[str, Any], name: str) -> SshTransport:
        """The transport ``describe`` described; the ssh config is not read again."""
        keys = tuple(data.get("identities") or ([data["identity"]] if data.get("identity")
                                                 else []))
        target = Hop(data["host"], int(data["port"]), data["user"], keys,
                     bool(data.get("agent", not keys)))
        jumps = tuple(Hop(j["host"], int(j["port"]), j["user"], tuple(j.get("identities") or ()),
                          bool(j.get("agent", True))) for j in data.get("jumps") or ())
        route = Route(target, jumps, data.get("proxy_command"),
                      Path(data["known_hosts"]).expanduser(),
                      float(data.get("connect_timeout", DEFAULT_TIMEOUT_S)), None)
        return cls.from_route(route, trust=data.get("trust", "known-hosts"), name=name)

    @classmethod
    def from_route(cls, route: Route, *, trust: Trust = "known-hosts",
                   name: str | None = None) -> SshTransport:
        """A transport for a route already resolved (no ssh config is read)."""
        transport = cls.__new__(cls)
        Transport.__init__(transport, name or route.target.host)
        transport._setup(route.target.host, route, trust)
        return transport

    # -- where: the resolved route -------------------------------------------------------------

    @property
    def host(self) -> str:
        """The target's address (an ssh config alias resolved to its HostName)."""
        return self.route.target.host

    @property
    def port(self) -> int:
        return self.route.target.port

    @property
    def user(self) -> str:
        return self.route.target.user

    @property
    def identity(self) -> str | None:
        """The first key offered to the target (None: ssh-agent and ~/.ssh/id_*)."""
        return self.route.target.identities[0] if self.route.target.identities else None

    @property
    def known_hosts(self) -> Path:
        return self.route.known_hosts

    @property
    def jumps(self) -> tuple[Hop, ...]:
        """The jump hosts in order (ProxyJump), empty for a direct connection."""
        return self.route.jumps

    @property
    def target(self) -> str:
        """``user@host:port`` for messages."""
        return self.route.target.target

    @property
    def _key(self) -> _PoolKey:
        # Everything that decides whether we may connect is in the key: a host entry with
        # another identity, route or host-key policy never borrows a connection it could
        # not make.
        r = self.route
        return (r.target, r.jumps, r.proxy_command, str(r.known_hosts), self.trust)

    # -- connection pool -------------------------------------------------------------------

    @property
    def paramiko_transport(self) -> paramiko.Transport:
        """The live pooled paramiko Transport to the target, connecting if needed."""
        entry = self._entry()
        with entry.lock:
            transport = entry.client.get_transport() if entry.client else None
            if transport is None or not transport.is_active():
                entry.close()
                entry.clients = self._connect()
                transport = entry.clients[-1].get_transport()
            assert transport is not None
        return transport

    def _entry(self) -> _Pooled:
        """The pool entry this transport holds (joining it on first use)."""
        with _POOL_LOCK:
            if self._held is not None:
                entry = _POOL.get(self._held)
                if entry is not None:
                    return entry
            self._held = self._key
            entry = _POOL.setdefault(self._held, _Pooled())
            entry.users += 1
            return entry

    def _drop(self, dead: paramiko.Transport) -> None:
        """Forget a pooled connection that failed, unless another thread already replaced it."""
        entry = self._entry()
        with entry.lock:
            if entry.client is not None and entry.client.get_transport() is dead:
                entry.close()

    def close(self) -> None:
        """Stop using the pooled connection; the last user to let go closes it."""
        with _POOL_LOCK:
            held, self._held = self._held, None
            entry = None if held is None else _POOL.get(held)
            if held is None or entry is None:
                return
            entry.users -= 1
            if entry.users > 0:
                return
            del _POOL[held]
        with entry.lock:
            entry.close()

    def _connect(self) -> list[paramiko.SSHClient]:
        """The authenticated chain: each jump host, then the target through the last one."""
        for identity in self.route.target.identities:
            local_file(identity, f"{self.name}: identity file")
        hops = [*self.route.jumps, self.route.target]
        clients: list[paramiko.SSHClient] = []
        try:
            sock: Any = None
            if self.route.proxy_command:
                sock = self._proxy_command()
            for index, hop in enumerate(hops):
                if index:
                    sock = self._forward(clients[-1], hops[index - 1], hop)
                clients.append(self._connect_hop(hop, sock, jump=index < len(hops) - 1))
        except BaseException:
            for client in reversed(clients):
                _close_client(client)
            raise
        return clients

    def _proxy_command(self) -> paramiko.ProxyCommand:
        command = self.route.proxy_command
        assert command is not None
        try:
            return paramiko.ProxyCommand(command)
        except (paramiko.SSHException, OSError) as exc:
            raise HostUnreachable(f"{self.name}: ProxyCommand {command!r} (ssh config "
                                  f"{self.route.config}) did not start: {exc}") from exc

    def _forward(self, client: paramiko.SSHClient, via: Hop, hop: Hop) -> paramiko.Channel:
        """A ``direct-tcpip`` channel from jump host ``via`` to ``hop`` (what ``ssh -J`` opens)."""
        transport = client.get_transport()
        assert transport is not None
        try:
            return transport.open_channel("direct-tcpip", (hop.host, hop.port), ("127.0.0.1", 0),
                                          timeout=self.connect_timeout)
        except paramiko.ChannelException as exc:
            raise HostUnreachable(
                f"{self.name}: jump host {via.target} could not connect to {hop.host}:{hop.port} "
                f"({exc.text.lower()}); check the address, and that the jump host's sshd allows "
                "TCP forwarding (AllowTcpForwarding)") from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise HostUnreachable(f"{self.name}: jump host {via.target} dropped the connection "
                                  f"while forwarding to {hop.host}:{hop.port} ({exc})") from exc

    def _connect_hop(self, hop: Hop, sock: Any, *, jump: bool) -> paramiko.SSHClient:
        """One authenticated connection (over ``sock`` when it comes through a jump host)."""
        client = paramiko.SSHClient()
        if self.known_hosts.is_file():
            client.load_system_host_keys(str(self.known_hosts))
        client.set_missing_host_key_policy(_UnknownKeyPolicy(self, hop))
        keys = list(hop.identities)
        if jump and not keys:  # a jump host without an IdentityFile: try the target's keys too
            keys = list(self.route.target.identities)
        try:
            client.connect(
                hop.host, port=hop.port, username=hop.user, key_filename=keys or None,
                allow_agent=hop.agent, look_for_keys=not hop.identities, sock=sock,
                timeout=self.connect_timeout, banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout, channel_timeout=self.connect_timeout)
        except BaseException as exc:
            # paramiko's handshake thread keeps the real cause when connect() reports a later one.
            started = client.get_transport()
            cause = exc
            if isinstance(exc, paramiko.SSHException | EOFError) and started is not None:
                cause = started.get_exception() or exc
            _close_client(client)
            raise self._translate(cause, hop, jump=jump) from exc
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(KEEPALIVE_S)
        return client

    def _translate(self, exc: BaseException, hop: Hop | None = None, *,
                   jump: bool = False) -> BaseException:
        """Map a paramiko/socket failure to the mainboard error a user can act on."""
        hop = hop or self.route.target
        what = "jump host " if jump else ""
        via = "" if jump else self.route.via
        where = f"{self.name}: cannot reach {what}{hop.host}:{hop.port}{via}"
        if isinstance(exc, HostError | UserError):
            return exc
        if isinstance(exc, paramiko.BadHostKeyException):
            return mismatch_error(self.name, hop.host, hop.port, exc.key, self.known_hosts)
        if isinstance(exc, paramiko.PasswordRequiredException):
            return AuthFailed(f"{self.name}: identity file for {what}{hop.target} is "
                              "passphrase-protected; load it into ssh-agent and drop `identity`, "
                              "or use a key without one")
        if isinstance(exc, paramiko.AuthenticationException):
            keys = hop.identities or (self.route.target.identities if jump else ())
            tried = (f"identity file {', '.join(keys)}" if keys
                     else "ssh-agent and ~/.ssh/id_* keys (no `identity` set)")
            fix = ("give the jump host an IdentityFile in the ssh config" if jump
                   else "set `identity` to the right key")
            return AuthFailed(f"{self.name}: {what}{hop.target} refused authentication with "
                              f"{tried}; add its public key to ~{hop.user}/.ssh/authorized_keys "
                              f"there or {fix}")
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
                self._kill_group(self._reported_pgid(channel, sink))
                return None
            code = channel.recv_exit_status()
            return 255 if code == -1 else code  # no exit-status (killed by a signal): as ssh does
        except KeyboardInterrupt:  # Ctrl-C here stops the command there too
            self._kill_group(self._reported_pgid(channel, sink))
            raise
        finally:
            channel.close()

    def _reported_pgid(self, channel: paramiko.Channel, sink: PgidCatcher) -> int | None:
        """The command's process group, read on from the channel when the shell's report has
        not been read yet: a timeout or a Ctrl-C can come while it is still in flight (the
        command already running there), and a group never read is a group never killed."""
        if sink.pgid is None:
            drain(channel, sink, time.monotonic() + self.connect_timeout,
                  lambda: sink.pgid is not None)
        return sink.pgid

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

    def __init__(self, owner: SshTransport, hop: Hop) -> None:
        self.owner, self.hop = owner, hop

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        o, hop = self.owner, self.hop
        check_unknown_key(o.name, hop.host, hop.port, key, o.known_hosts, o.trust == "first-use")


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
