"""Reverse tunnels for real: a host in its own network namespace reaches a loopback-only
Redis only through the tunnel, over a real sshd inside that namespace.

Commands in the namespace get the Redis password through REDISCLI_AUTH / the
environment, never argv. Nothing asserts on wall time: recovery is polled.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from mainboard.bridges.ssh import SshTransport
from mainboard.bridges.tunnel import Backoff, ReverseTunnel, TunnelManager
from mainboard.errors import HostUnreachable, TunnelError, UserError
from tests.support.netns import (
    NetnsHost,
    cleanup_stale,
    free_subnet_index,
    make_netns_host,
    require_netns,
)
from tests.support.services import RedisServer, free_port, require, start_redis

pytestmark = pytest.mark.live
T = TypeVar("T")
FAST = Backoff(base=0.2, cap=1.0, jitter=0.5)

# Runs inside the namespace: N connections held open at once, each AUTH + INCR + PING.
PARALLEL = r"""
import os, socket, sys
port, n, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
def cmd(*a): return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a)
socks = [socket.create_connection(("127.0.0.1", port), timeout=20) for _ in range(n)]
for s in socks:
    s.sendall(cmd(b"AUTH", os.environ["PW"].encode()) + cmd(b"INCR", key) + cmd(b"PING"))
ok = 0
for s in socks:
    buf = b""
    while not buf.endswith(b"+PONG\r\n") and (chunk := s.recv(4096)):
        buf += chunk
    ok += buf.startswith(b"+OK\r\n:") and buf.endswith(b"+PONG\r\n")
print(ok)
"""

# Runs inside the namespace: one authenticated connection, then wait for the far end to close.
HOLD = r"""
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
s.sendall(b"AUTH " + os.environ["PW"].encode() + b"\r\nPING\r\n")
buf = b""
while not buf.endswith(b"+PONG\r\n"):
    buf += s.recv(100)
print("ready", flush=True)
print("closed" if s.recv(100) == b"" else "data", flush=True)
"""


def eventually(check: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    """Poll ``check`` until it returns something truthy (generous timeout, no timing asserts)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, f"timed out after {timeout:g}s waiting for {what}"
            return value
        time.sleep(0.1)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsHost]:
    """The "remote" host: its own network namespace and hostname, sshd on 10.78.N.2."""
    require_netns()
    require("redis-cli", "apt-get install redis-tools")
    cleanup_stale()
    host = make_netns_host("tun", free_subnet_index(), tmp_path_factory.mktemp("netns"),
                           hostname="mbt-node")
    try:
        yield host
    finally:
        host.cleanup()


def _redis(directory: Path, whoami: str) -> RedisServer:
    server = start_redis(directory, password=secrets.token_urlsafe(16))
    redis.Redis.from_url(server.url).set("whoami", whoami)
    return server


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The coordinator's broker: password-protected, bound to the host's 127.0.0.1 only."""
    server = _redis(tmp_path_factory.mktemp("broker"), "first")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def other_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = _redis(tmp_path_factory.mktemp("broker2"), "second")
    yield server
    server.stop()


@pytest.fixture
def ssh(node: NetnsHost, tmp_path: Path) -> Iterator[SshTransport]:
    """The ssh bridge's pooled connection to the namespaced host (sshd restarted if a test
    stopped it)."""
    if node.ssh is None or node.ssh.proc.poll() is not None:
        node.start_sshd()
    assert node.ssh is not None
    transport = SshTransport(node.addr, port=node.ssh.port, user=node.ssh.user,
                             identity=str(node.ssh.identity),
                             known_hosts=str(node.ssh.known_hosts(tmp_path / "known_hosts")),
                             connect_timeout=5.0, name="mbt-node")
    yield transport
    transport.close()


@pytest.fixture
def open_tunnel(ssh: SshTransport) -> Iterator[Callable[..., ReverseTunnel]]:
    """Start tunnels over ``ssh``; every one is stopped at teardown, even on failure."""
    made: list[ReverseTunnel] = []

    def start(local_port: int, remote_port: int | None = 0, **options: Any) -> ReverseTunnel:
        tunnel = ReverseTunnel(lambda: ssh.paramiko_transport, remote_port,
                               local_port=local_port, name="mbt-node",
                               backoff=options.pop("backoff", FAST), **options)
        made.append(tunnel)
        return tunnel.start()

    yield start
    for tunnel in made:
        tunnel.stop()


@pytest.fixture
def tunnel_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="mainboard.tunnel")
    return caplog


def cli(node: NetnsHost, server: RedisServer, port: int, *args: str,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """redis-cli inside the namespace; the password travels in REDISCLI_AUTH, not argv."""
    env = {"PATH": os.environ["PATH"], "REDISCLI_AUTH": server.password or ""}
    return node.run(["redis-cli", "-p", str(port), *args], env=env, input=stdin)


def pong(node: NetnsHost, server: RedisServer, port: int | None) -> bool:
    assert port is not None
    return cli(node, server, port, "ping").stdout.strip() == "PONG"


def refused(node: NetnsHost, port: int | None) -> bool:
    """Nothing listens on the namespace's 127.0.0.1:port."""
    probe = node.run([sys.executable, "-c", "import socket,sys; socket.create_connection("
                      "('127.0.0.1', int(sys.argv[1])), timeout=5)", str(port)])
    return probe.returncode != 0 and "ConnectionRefusedError" in probe.stderr


def test_namespace_reaches_host_loopback_redis_only_through_the_tunnel(
        node: NetnsHost, broker: RedisServer, ssh: SshTransport,
        open_tunnel: Callable[..., ReverseTunnel], tunnel_log: pytest.LogCaptureFixture) -> None:
    assert ssh.run("hostname").stdout == "mbt-node\n"  # sshd really runs in the other host
    assert refused(node, broker.port)
    direct = node.run([sys.executable, "-c", "import socket,sys; socket.create_connection("
                       "(sys.argv[1], int(sys.argv[2])), timeout=5)", node.host_addr,
                       str(broker.port)])
    assert direct.returncode != 0 and "ConnectionRefusedError" in direct.stderr
    assert not pong(node, broker, broker.port)

    tunnel = open_tunnel(broker.port)
    assert tunnel.healthy and tunnel.remote_port not in (None, 0, broker.port)
    port = tunnel.remote_port
    assert pong(node, broker, port)
    key, big = f"mbt-{uuid.uuid4().hex}", secrets.token_hex(512 * 1024)  # 1 MiB of text
    assert cli(node, broker, port, "set", key, "hello from the namespace").stdout == "OK\n"
    assert cli(node, broker, port, "get", key).stdout == "hello from the namespace\n"
    assert cli(node, broker, port, "-x", "set", key + "-big", stdin=big).stdout == "OK\n"
    assert cli(node, broker, port, "--raw", "get", key + "-big").stdout.rstrip("\n") == big
    assert redis.Redis.from_url(broker.url).get(key) == b"hello from the namespace"
    assert tunnel.status().connections >= 5
    assert broker.password and broker.password not in tunnel_log.text


def test_killed_ssh_connection_is_reconnected_on_the_same_port(
        node: NetnsHost, broker: RedisServer, open_tunnel: Callable[..., ReverseTunnel],
        tunnel_log: pytest.LogCaptureFixture) -> None:
    tunnel = open_tunnel(broker.port)
    port = tunnel.remote_port
    assert pong(node, broker, port)
    assert node.kill_ssh_sessions() >= 1  # the sshd child serving our connection dies
    eventually(lambda: tunnel.reconnects >= 1 and tunnel.healthy, "the tunnel to reconnect")
    assert tunnel.remote_port == port
    eventually(lambda: pong(node, broker, port), "PONG through the reconnected tunnel")
    assert "lost (connection closed)" in tunnel_log.text and "reconnected after" in tunnel_log.text


def test_backs_off_while_sshd_is_down_and_recovers_when_it_returns(
        node: NetnsHost, broker: RedisServer, open_tunnel: Callable[..., ReverseTunnel],
        tunnel_log: pytest.LogCaptureFixture) -> None:
    tunnel = open_tunnel(broker.port)
    port = tunnel.remote_port
    node.stop_sshd()

    def failed() -> list[logging.LogRecord]:
        return [r for r in tunnel_log.records if "attempt %d failed" in str(r.msg)]

    eventually(lambda: len(failed()) >= 3, "three failed reconnect attempts")
    assert not tunnel.healthy and "cannot reach" in (tunnel.last_error or "")
    delays = [float(r.args[2]) for r in tunnel_log.records  # type: ignore[index]
              if str(r.msg).endswith("in %.2fs")][:3]
    assert delays[0] < delays[1] < delays[2] <= FAST.cap  # exponential, jittered, capped
    node.start_sshd()  # same port, same host key
    eventually(lambda: tunnel.healthy and tunnel.reconnects >= 1, "reconnect after sshd returns")
    assert tunnel.remote_port == port
    eventually(lambda: pong(node, broker, port), "PONG after sshd came back")


def test_a_silent_peer_is_caught_by_the_probe_and_its_port_reclaimed(
        node: NetnsHost, broker: RedisServer, open_tunnel: Callable[..., ReverseTunnel],
        tunnel_log: pytest.LogCaptureFixture) -> None:
    tunnel = open_tunnel(broker.port, probe_interval=0.5, request_timeout=1.0)
    port = tunnel.remote_port
    assert node.signal_ssh_sessions(signal.SIGSTOP) >= 1  # TCP stays up, nothing answers
    try:
        # The frozen session still holds 127.0.0.1:port there: asking again is refused.
        eventually(lambda: any(f"127.0.0.1:{port} (the port is in use" in r.getMessage()
                               for r in tunnel_log.records), "a refused re-request")
        assert not tunnel.healthy and "lost (no answer to a probe within 1s)" in tunnel_log.text
    finally:
        node.signal_ssh_sessions(signal.SIGCONT)  # it sees its closed socket and exits
    eventually(lambda: tunnel.healthy and tunnel.reconnects >= 1, "the port to be reclaimed")
    assert tunnel.remote_port == port
    eventually(lambda: pong(node, broker, port), "PONG after the silent peer")


def test_stop_closes_the_remote_listener_and_open_connections(
        node: NetnsHost, broker: RedisServer,
        open_tunnel: Callable[..., ReverseTunnel]) -> None:
    tunnel = open_tunnel(broker.port)
    port = tunnel.remote_port
    held = node.popen([sys.executable, "-c", HOLD, str(port)], stdout=subprocess.PIPE,
                      env={**os.environ, "PW": broker.password or ""})
    try:
        assert held.stdout is not None and held.stdout.readline() == "ready\n"
        tunnel.stop()
        assert held.communicate(timeout=20)[0] == "closed\n"
    finally:
        held.kill()
        held.wait()
    assert not tunnel.healthy and tunnel.status().active == 0
    assert refused(node, port)
    with pytest.raises(TunnelError, match="stopped"):
        tunnel.start()


def test_twenty_connections_at_once(node: NetnsHost, broker: RedisServer,
                                    open_tunnel: Callable[..., ReverseTunnel]) -> None:
    tunnel = open_tunnel(broker.port)
    key = f"mbt-hits-{uuid.uuid4().hex}"
    run = node.run([sys.executable, "-c", PARALLEL, str(tunnel.remote_port), "20", key],
                   env={**os.environ, "PW": broker.password or ""})
    assert (run.returncode, run.stdout, run.stderr) == (0, "20\n", "")
    assert redis.Redis.from_url(broker.url).get(key) == b"20"
    assert tunnel.status().connections == 20


def test_tunnels_sharing_one_ssh_connection_are_routed_by_port(
        node: NetnsHost, broker: RedisServer, other_broker: RedisServer,
        open_tunnel: Callable[..., ReverseTunnel]) -> None:
    first, second = open_tunnel(broker.port), open_tunnel(other_broker.port)
    assert cli(node, broker, first.remote_port, "get", "whoami").stdout == "first\n"
    assert cli(node, other_broker, second.remote_port, "get", "whoami").stdout == "second\n"
    first.stop()  # paramiko's cancel_port_forward would cut the second one off too
    assert refused(node, first.remote_port)
    assert cli(node, other_broker, second.remote_port, "get", "whoami").stdout == "second\n"


def test_a_remote_port_in_use_is_refused_with_a_clear_error(
        broker: RedisServer, open_tunnel: Callable[..., ReverseTunnel]) -> None:
    taken = open_tunnel(broker.port).remote_port
    with pytest.raises(TunnelError) as caught:
        open_tunnel(broker.port, remote_port=taken)
    assert f"127.0.0.1:{taken}" in str(caught.value) and "in use" in str(caught.value)
    assert "mbt-node" in str(caught.value)


def test_an_unreachable_host_fails_start_with_host_unreachable(node: NetnsHost,
                                                               broker: RedisServer) -> None:
    closed = SshTransport(node.addr, port=free_port(), connect_timeout=3.0, name="nowhere")
    tunnel = ReverseTunnel(lambda: closed.paramiko_transport, 0, local_port=broker.port)
    with pytest.raises(HostUnreachable, match=f"cannot reach {node.addr}"):
        tunnel.start()
    assert not tunnel.healthy and tunnel.remote_port is None
    closed.close()


def test_manager_keeps_one_tunnel_per_host(node: NetnsHost, ssh: SshTransport,
                                          broker: RedisServer,
                                          other_broker: RedisServer) -> None:
    def factory() -> Any:
        return ssh.paramiko_transport

    with TunnelManager(backoff=FAST) as manager:
        a = manager.open("host-a", factory, local_port=broker.port)
        assert manager.open("host-a", factory, local_port=broker.port) is a
        b = manager.open("host-b", factory, local_port=broker.port)
        assert b is not a and b.remote_port != a.remote_port
        assert pong(node, broker, a.remote_port) and pong(node, broker, b.remote_port)
        moved = manager.open("host-a", factory, local_port=other_broker.port)
        assert moved is not a and a.stopped and manager.get("host-a") is moved
        assert cli(node, other_broker, moved.remote_port, "get", "whoami").stdout == "second\n"
        status = manager.status()
        assert set(status) == {"host-a", "host-b"} and all(s.healthy for s in status.values())
        assert status["host-a"].local == f"127.0.0.1:{other_broker.port}"
    assert moved.stopped and b.stopped
    assert refused(node, moved.remote_port) and refused(node, b.remote_port)


@pytest.mark.parametrize(("options", "named"), [
    ({"remote_port": -1}, "remote_port -1"),
    ({"remote_port": 70000}, "remote_port 70000"),
    ({"remote_port": "6000"}, "remote_port '6000'"),
    ({"local_port": True}, "local_port True"),
    ({"local_port": 0}, "local_port 0"),
    ({"local_port": 65536}, "local_port 65536"),
    ({"local_host": ""}, "local_host is empty"),
])
def test_bad_tunnel_settings_are_refused_before_connecting(options: dict[str, Any],
                                                           named: str) -> None:
    settings: dict[str, Any] = {"remote_port": 0, "local_port": 7000, **options}

    def never() -> Any:
        raise AssertionError("must not connect with bad settings")

    with pytest.raises(UserError) as caught:
        ReverseTunnel(never, settings.pop("remote_port"), name="box", **settings)
    assert named in str(caught.value) and "valid:" in str(caught.value)


@pytest.mark.parametrize("values", [{"base": 0}, {"cap": 0.1}, {"jitter": 1.5}, {"jitter": -0.1}])
def test_bad_backoff_is_refused(values: dict[str, float]) -> None:
    with pytest.raises(UserError, match="valid: base > 0, cap >= base, 0 <= jitter <= 1"):
        Backoff(**values)


def test_backoff_doubles_up_to_the_cap_within_the_jitter() -> None:
    backoff, rng = Backoff(base=0.5, cap=8.0, jitter=0.25), random.Random(7)
    for attempt in range(12):
        ceiling = min(8.0, 0.5 * 2 ** attempt)
        assert ceiling * 0.75 <= backoff.delay(attempt, rng) <= ceiling
    assert Backoff(jitter=0).delay(3) == 4.0 and Backoff(jitter=0).delay(1000) == 30.0


def test_cleanup_stale_removes_what_a_crashed_run_left(node: NetnsHost, tmp_path: Path) -> None:
    crash = ("import os, sys; from pathlib import Path; from tests.support.netns import make_netns_host\n"
             "h = make_netns_host('crash', int(sys.argv[1]), Path(sys.argv[2]))\n"
             "print(h.name, h.veth_host, h.ssh.proc.pid, flush=True); os._exit(0)")
    repo = Path(__file__).resolve().parents[2]
    with subprocess.Popen([sys.executable, "-c", crash, str(free_subnet_index()), str(tmp_path)],
                          cwd=repo, stdout=subprocess.PIPE, text=True) as crashed:
        assert crashed.stdout is not None  # (the orphaned sshd keeps the pipe: read one line)
        name, veth, sshd_pid = crashed.stdout.readline().split()
        assert crashed.wait(30) == 0
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert name in listed and os.path.exists(f"/proc/{sshd_pid}")  # left behind, still running
    removed = cleanup_stale()
    assert name in removed and node.name not in removed  # a live run's host is left alone
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert name not in listed and f"{veth}@" not in links and node.name in listed
    eventually(lambda: not os.path.exists(f"/proc/{sshd_pid}") or
               Path(f"/proc/{sshd_pid}/stat").read_text().split(") ")[1].startswith("Z"),
               "the orphaned sshd to die")
