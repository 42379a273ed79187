"""Reverse ssh tunnels: a worker behind NAT reaches the coordinator's loopback-only broker.

The coordinator asks a host's sshd to listen on that host's 127.0.0.1:PORT (the
``tcpip-forward`` request, what ``ssh -R`` sends) and pumps every connection arriving
there to the local broker, one thread per connection. A supervisor thread notices a
dead connection and reconnects with exponential back-off and jitter, asking for the
SAME remote port, so workers configured with ``redis://127.0.0.1:PORT`` carry on.

Several tunnels may share the ssh bridge's pooled connection to a host: the per-port
routing that makes this work lives in ``bridges/forwards.py``.
Usage: ``ReverseTunnel(lambda: ssh.paramiko_transport, 0, local_port=broker_port)``.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import paramiko

from mainboard.bridges.forwards import close_channel, forwards_of, log, pump
from mainboard.errors import HostError, TunnelError, UserError

_RETRYABLE = (HostError, paramiko.SSHException, EOFError, OSError)
TransportFactory = Callable[[], paramiko.Transport]


@dataclass(frozen=True)
class Backoff:
    """Delays between reconnect attempts: ``base * 2**attempt`` capped at ``cap``, minus up to
    ``jitter`` of it at random so many tunnels cut at once do not reconnect in lockstep."""

    base: float = 0.5
    cap: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not (self.base > 0 and self.cap >= self.base and 0 <= self.jitter <= 1):
            raise UserError(f"tunnel back-off: base={self.base!r}, cap={self.cap!r}, "
                            f"jitter={self.jitter!r}; valid: base > 0, cap >= base, "
                            "0 <= jitter <= 1")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before reconnect attempt number ``attempt`` (0-based)."""
        raw = min(self.cap, self.base * 2 ** min(attempt, 62))
        return raw * (1 - self.jitter * (rng or random).random())


@dataclass(frozen=True)
class TunnelStatus:
    """A tunnel as ``fleet status`` shows it; no secrets in here."""

    name: str
    remote_port: int | None
    local: str
    healthy: bool
    reconnects: int
    connections: int
    active: int
    last_error: str | None


class ReverseTunnel:
    """The far host's 127.0.0.1:remote_port forwarded to local_host:local_port, kept alive."""

    def __init__(self, transport_factory: TransportFactory, remote_port: int | None = None, *,
                 local_port: int, local_host: str = "127.0.0.1", name: str = "tunnel",
                 backoff: Backoff | None = None, probe_interval: float = 10.0,
                 request_timeout: float = 10.0, connect_timeout: float = 5.0,
                 stable_after: float = 10.0) -> None:
        for what, value, low in (("remote_port", remote_port or 0, 0),
                                 ("local_port", local_port, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 65535:
                raise UserError(f"tunnel {name}: {what} {value!r} is not a TCP port; "
                                f"valid: an integer {low}..65535"
                                + (" (0 or None: the server picks)" if low == 0 else ""))
        if not local_host:
            raise UserError(f"tunnel {name}: local_host is empty; valid: a host name or address")
        self.name, self.local_host, self.local_port = name, local_host, local_port
        self.backoff = backoff or Backoff()
        self.probe_interval, self.request_timeout = probe_interval, request_timeout
        self.connect_timeout, self.stable_after = connect_timeout, stable_after
        self._factory = transport_factory
        self._wanted = remote_port or 0
        self._granted: int | None = None
        self._transport: paramiko.Transport | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._conns: set[tuple[paramiko.Channel, socket.socket]] = set()
        self._established_at = 0.0
        self.reconnects = self.connections = 0
        self.last_error: str | None = None

    @property
    def remote_port(self) -> int | None:
        """The port sshd listens on at the far side (None before the first start)."""
        return self._granted

    @property
    def local(self) -> str:
        return f"{self.local_host}:{self.local_port}"

    @property
    def healthy(self) -> bool:
        """Forwarding right now: started, not stopped, and the ssh connection is alive."""
        transport = self._transport
        return (transport is not None and transport.is_active()
                and not self._stopping.is_set())

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    def status(self) -> TunnelStatus:
        with self._lock:
            active = len(self._conns)
        return TunnelStatus(self.name, self._granted, self.local, self.healthy, self.reconnects,
                            self.connections, active, self.last_error)

    def start(self) -> ReverseTunnel:
        """Open the forward now (errors raise: TunnelError, HostError), then keep it alive."""
        if self._stopping.is_set():
            raise TunnelError(f"tunnel {self.name}: stopped; make a new ReverseTunnel")
        if self._supervisor is None:
            self._establish()
            self._supervisor = threading.Thread(target=self._supervise, daemon=True,
                                                name=f"tunnel-{self.name}")
            self._supervisor.start()
        return self

    def stop(self) -> None:
        """Close the far listener and every forwarded connection; no reconnects after this."""
        first = not self._stopping.is_set()
        self._stopping.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(self.request_timeout + self.connect_timeout + 2.0)
        self._drop(cancel=True)
        if first:
            log.info("tunnel %s: stopped (remote 127.0.0.1:%s)", self.name, self._granted)

    def __enter__(self) -> ReverseTunnel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connection lifecycle ---------------------------------------------------------------

    def _establish(self) -> None:
        transport = self._factory()
        want = self._granted if self._granted is not None else self._wanted
        try:
            port = forwards_of(transport).add(transport, want, self._serve, self.request_timeout)
        except TunnelError as exc:
            raise TunnelError(f"tunnel {self.name}: {exc}") from exc
        with self._lock:
            late = self._stopping.is_set()
            if not late:
                self._transport, self._granted = transport, port
                self._established_at = time.monotonic()
        if late:  # stop() ran while we were connecting: give the port back
            forwards_of(transport).remove(transport, port, self.request_timeout)
            return
        log.info("tunnel %s: remote 127.0.0.1:%d -> %s open", self.name, port, self.local)

    def _drop(self, cancel: bool) -> None:
        """Forget the current connection; ``cancel`` also closes sshd's listener if alive."""
        with self._lock:
            transport, self._transport = self._transport, None
            conns, self._conns = list(self._conns), set()
        if transport is not None and self._granted is not None:
            try:
                if cancel:
                    forwards_of(transport).remove(transport, self._granted, self.request_timeout)
                else:
                    forwards_of(transport).forget(self._granted)
            except _RETRYABLE as exc:
                log.warning("tunnel %s: could not cancel remote port %d: %s", self.name,
                            self._granted, exc)
        for channel, sock in conns:
            close_channel(channel)
            sock.close()

    def _dead(self, transport: paramiko.Transport | None, probe: bool) -> str | None:
        """Why the connection is unusable, or None. ``probe`` opens a channel to catch a peer
        that went silent (TCP still up, nothing answering)."""
        if transport is None or not transport.is_active():
            return "connection closed"
        if probe:
            try:
                transport.open_session(timeout=self.request_timeout).close()
            except paramiko.ChannelException:
                pass  # sshd answered (e.g. MaxSessions reached): the connection is alive
            except (paramiko.SSHException, EOFError, OSError):
                transport.close()  # unresponsive: closing lets the ssh pool reconnect
                return f"no answer to a probe within {self.request_timeout:g}s"
        return None

    def _watch(self) -> str:
        """Return once the connection is dead (why), or we are stopping ("stopping")."""
        next_probe = time.monotonic() + self.probe_interval
        while not self._stopping.wait(0.2):
            probe = time.monotonic() >= next_probe
            reason = self._dead(self._transport, probe)
            if reason:
                return reason
            if probe:
                next_probe = time.monotonic() + self.probe_interval
        return "stopping"

    def _supervise(self) -> None:
        attempt = 0
        while True:
            reason = self._watch()
            if self._stopping.is_set():
                return
            if time.monotonic() - self._established_at >= self.stable_after:
                attempt = 0  # it had been fine for a while: start the back-off over
            self._drop(cancel=False)
            log.warning("tunnel %s: ssh connection lost (%s); reconnecting", self.name, reason)
            while True:
                delay = self.backoff.delay(attempt)
                attempt += 1
                log.info("tunnel %s: reconnect attempt %d in %.2fs", self.name, attempt, delay)
                if self._stopping.wait(delay):
                    return
                try:
                    self._establish()
                except Exception as exc:  # noqa: BLE001 - a supervisor retries whatever failed
                    self.last_error = str(exc).removeprefix(f"tunnel {self.name}: ")
                    log.warning("tunnel %s: reconnect attempt %d failed: %s", self.name,
                                attempt, self.last_error)
                    continue
                self.reconnects += 1
                log.info("tunnel %s: reconnected after %d attempt(s)", self.name, attempt)
                break

    def _serve(self, channel: paramiko.Channel) -> None:
        """One forwarded connection (in its own thread): connect locally and pump."""
        if self._stopping.is_set():
            close_channel(channel)
            return
        try:
            sock = socket.create_connection((self.local_host, self.local_port),
                                            timeout=self.connect_timeout)
        except OSError as exc:
            log.warning("tunnel %s: cannot reach %s for a forwarded connection: %s",
                        self.name, self.local, exc.strerror or exc)
            close_channel(channel)
            return
        sock.settimeout(None)
        conn = (channel, sock)
        with self._lock:
            self._conns.add(conn)
            self.connections += 1
        try:
            pump(channel, sock)
        finally:
            with self._lock:
                self._conns.discard(conn)
            close_channel(channel)
            sock.close()


class TunnelManager:
    """The coordinator's tunnels, one per host: opened on demand, reused, closed together."""

    def __init__(self, backoff: Backoff | None = None, probe_interval: float = 10.0) -> None:
        self.backoff, self.probe_interval = backoff, probe_interval
        self._tunnels: dict[str, ReverseTunnel] = {}
        self._host_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def open(self, host: str, transport_factory: TransportFactory, *, local_port: int,
             local_host: str = "127.0.0.1", remote_port: int | None = None) -> ReverseTunnel:
        """The host's tunnel to local_host:local_port, reusing a live one that matches."""
        with self._lock:
            host_lock = self._host_locks.setdefault(host, threading.Lock())
        with host_lock:  # hosts connect in parallel; one host never gets two tunnels
            old = self._tunnels.get(host)
            if old is not None and not old.stopped and old.local == f"{local_host}:{local_port}" \
                    and remote_port in (None, 0, old.remote_port):
                return old
            if old is not None:
                old.stop()
            tunnel = ReverseTunnel(transport_factory, remote_port, local_port=local_port,
                                   local_host=local_host, name=host, backoff=self.backoff,
                                   probe_interval=self.probe_interval).start()
            with self._lock:
                self._tunnels[host] = tunnel
            return tunnel

    def get(self, host: str) -> ReverseTunnel | None:
        with self._lock:
            return self._tunnels.get(host)

    def close(self, host: str) -> None:
        with self._lock:
            tunnel = self._tunnels.pop(host, None)
        if tunnel is not None:
            tunnel.stop()

    def close_all(self) -> None:
        with self._lock:
            hosts = list(self._tunnels)
        for host in hosts:
            self.close(host)

    def status(self) -> dict[str, TunnelStatus]:
        with self._lock:
            return {host: tunnel.status() for host, tunnel in self._tunnels.items()}

    def __enter__(self) -> TunnelManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()
