"""Remote forwards over one paramiko connection, shared by every tunnel using it.

paramiko keeps ONE forwarded-connection handler per connection and the ssh bridge
shares one connection per host, so forwards are routed by remote port here, and
cancelled without ``Transport.cancel_port_forward`` (which drops the handler of every
other tunnel on the connection). Global requests get the deadline paramiko lacks.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import select
import socket
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import paramiko

from mainboard.errors import TunnelError

log = logging.getLogger("mainboard.tunnel")
REMOTE_BIND = "127.0.0.1"  # the far side's loopback: only processes on that host can use it
_BUF = 65536
T = TypeVar("T")
_End = paramiko.Channel | socket.socket  # either side of a forwarded connection


def within(timeout: float, transport: paramiko.Transport, what: str, call: Callable[[], T]) -> T:
    """Run a paramiko global request, which has no timeout of its own, with a deadline.

    On timeout the connection is unresponsive: closing it unblocks the call and lets
    the pool (or our supervisor) replace it.
    """
    box: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box.append((False, exc))

    worker = threading.Thread(target=run, name="tunnel-request", daemon=True)
    worker.start()
    worker.join(timeout)
    if not box:
        transport.close()
        raise TunnelError(f"no answer to {what} within {timeout:g}s; connection closed")
    ok, value = box[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


def close_channel(channel: paramiko.Channel) -> None:
    """Close a forwarded channel whose transport may be gone already (the host dropped the
    connection): paramiko then raises EOFError from close, which would end the pump thread
    with a traceback for a connection that is over anyway."""
    with contextlib.suppress(EOFError, OSError, paramiko.SSHException):
        channel.close()


@dataclass
class Forwards:
    """The remote ports forwarded over one paramiko connection and who serves each."""

    request_lock: threading.Lock = field(default_factory=threading.Lock)
    routes: dict[int, Callable[[paramiko.Channel], None]] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def add(self, transport: paramiko.Transport, port: int,
            serve: Callable[[paramiko.Channel], None], timeout: float) -> int:
        """Ask sshd to listen on its 127.0.0.1:``port`` (0: it picks); returns the port."""
        with self.request_lock:  # paramiko tracks one pending global request at a time
            try:
                granted = within(timeout, transport, f"tcpip-forward {REMOTE_BIND}:{port}",
                                 lambda: transport.request_port_forward(
                                     REMOTE_BIND, port, handler=self.dispatch))
            except paramiko.SSHException as exc:
                if not transport.is_active():
                    raise TunnelError(f"connection lost while asking for port {port}") from exc
                raise TunnelError(f"sshd refused to listen on {REMOTE_BIND}:{port} (the port is "
                                  "in use there, or AllowTcpForwarding/PermitListen forbid it)"
                                  ) from exc
        with self.changed:
            self.routes[granted] = serve
            self.changed.notify_all()
        return granted

    def forget(self, port: int) -> None:
        """Stop routing ``port`` (its connection is gone, and sshd's listener with it)."""
        with self.changed:
            self.routes.pop(port, None)

    def remove(self, transport: paramiko.Transport, port: int, timeout: float) -> None:
        """Stop routing ``port`` and, on a live connection, close sshd's listener for it."""
        self.forget(port)
        if transport.is_active():
            with self.request_lock:
                within(timeout, transport, f"cancel-tcpip-forward {REMOTE_BIND}:{port}",
                       lambda: transport.global_request(
                           "cancel-tcpip-forward", (REMOTE_BIND, port), wait=True))

    def dispatch(self, channel: paramiko.Channel, origin: tuple[str, int],
                 server: tuple[str, int]) -> None:
        """paramiko's handler, called in its reader thread: must not block, so hand off."""
        threading.Thread(target=self._route, args=(channel, server[1]),
                         name=f"tunnel-pump-{server[1]}", daemon=True).start()

    def _route(self, channel: paramiko.Channel, port: int) -> None:
        with self.changed:  # a connection may beat add() to registering a server-chosen port
            self.changed.wait_for(lambda: port in self.routes, timeout=5.0)
            serve = self.routes.get(port)
        if serve is None:
            log.warning("tunnel: connection for unforwarded remote port %d refused", port)
            close_channel(channel)
            return
        serve(channel)


_REGISTRY: weakref.WeakKeyDictionary[paramiko.Transport, Forwards] = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def forwards_of(transport: paramiko.Transport) -> Forwards:
    """The forwards of one connection (made on first use, gone with the connection)."""
    with _REGISTRY_LOCK:
        return _REGISTRY.setdefault(transport, Forwards())


def pump(channel: paramiko.Channel, sock: socket.socket) -> None:
    """Copy bytes both ways until both sides are done (half-closes are passed on)."""
    # Each direction: source, target, and how to tell the target the source has finished.
    directions: tuple[tuple[_End, _End, Callable[[], None]], ...] = (
        (sock, channel, channel.shutdown_write),
        (channel, sock, functools.partial(sock.shutdown, socket.SHUT_WR)),
    )
    reading: dict[_End, bool] = {channel: True, sock: True}
    try:
        while any(reading.values()) and not channel.closed:
            ready, _, _ = select.select([s for s, on in reading.items() if on], [], [], 1.0)
            for source, target, half_close in directions:
                if source in ready:
                    data = source.recv(_BUF)
                    if data:
                        target.sendall(data)
                    else:
                        reading[source] = False
                        half_close()
    except (OSError, ValueError, EOFError, paramiko.SSHException):
        pass  # either side vanished (or stop() closed them): the connection is over
