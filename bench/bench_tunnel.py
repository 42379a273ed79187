"""Cost of reaching the broker through a ReverseTunnel, against the `ssh -R` binary and direct.

Run as root from the repository root:  .venv/bin/python bench/bench_tunnel.py [-n 2000]
Builds a network-namespace host (tests/support/netns.py) with sshd inside, a password-protected
Redis on the host's 127.0.0.1, then from inside the namespace measures one connection
doing N sequential PINGs and a 16 MiB SET+GET through (a) our paramiko tunnel and
(b) `ssh -N -R` (OpenSSH client), and the same client on the host directly (no tunnel).
Also times ReverseTunnel.start() and recovery after the serving sshd child is killed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.*

from mainboard.bridges.ssh import SshTransport  # noqa: E402
from mainboard.bridges.tunnel import ReverseTunnel  # noqa: E402
from tests.support.netns import NetnsHost, cleanup_stale, free_subnet_index, make_netns_host  # noqa: E402
from tests.support.services import free_port, start_redis  # noqa: E402

CLIENT = r"""
import os, socket, statistics, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port), timeout=30)
def call(raw, reply_end=b"\r\n"):
    s.sendall(raw); buf = b""
    while not buf.endswith(reply_end): buf += s.recv(1 << 20)
    return buf
def cmd(*a): return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a)
call(cmd(b"AUTH", os.environ["PW"].encode()))
rtts = []
for _ in range(n):
    t = time.perf_counter(); call(b"PING\r\n"); rtts.append(time.perf_counter() - t)
big = os.urandom(8 << 20).hex().encode()  # 16 MiB
t = time.perf_counter(); call(cmd(b"SET", b"bench-big", big))
got = call(cmd(b"GET", b"bench-big"), big + b"\r\n"); dt = time.perf_counter() - t
assert got.endswith(big + b"\r\n")
print(f"{statistics.median(rtts) * 1e6:.0f} {statistics.quantiles(rtts, n=10)[-1] * 1e6:.0f} "
      f"{2 * len(big) / dt / 1e6:.0f}")
"""


def measure(label: str, argv: list[str], env: dict[str, str]) -> None:
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    median, p90, mbps = out.split()
    print(f"{label:38s} PING median {median:>5s} us  p90 {p90:>5s} us  16 MiB SET+GET {mbps} MB/s")


def ssh_binary_tunnel(node: NetnsHost, known: Path, broker_port: int) -> tuple[
        subprocess.Popen[bytes], int]:
    """`ssh -N -R` forwarding the namespace's 127.0.0.1:PORT to the broker; waits until up."""
    assert node.ssh is not None
    port = free_port()
    proc = subprocess.Popen(
        ["ssh", "-N", "-i", str(node.ssh.identity), "-p", str(node.ssh.port),
         "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
         "-o", "ExitOnForwardFailure=yes", "-o", "BatchMode=yes",
         "-R", f"127.0.0.1:{port}:127.0.0.1:{broker_port}", f"root@{node.addr}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)"
    for _ in range(100):
        if node.run([sys.executable, "-c", probe, str(port)]).returncode == 0:
            return proc, port
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("ssh -R did not come up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="sequential PINGs per client")
    args = parser.parse_args()
    cleanup_stale()
    with tempfile.TemporaryDirectory(prefix="mbt-bench-") as tmp:
        base = Path(tmp)
        node = make_netns_host("bench", free_subnet_index(), base / "ns")
        broker = start_redis(base / "redis", password=os.urandom(12).hex())
        env = {**os.environ, "PW": broker.password or ""}
        try:
            assert node.ssh is not None
            known = node.ssh.known_hosts(base / "known_hosts")
            ssh = SshTransport(node.addr, port=node.ssh.port, identity=str(node.ssh.identity),
                               known_hosts=str(known))
            started = time.perf_counter()
            tunnel = ReverseTunnel(lambda: ssh.paramiko_transport, 0, local_port=broker.port,
                                   name="bench").start()
            print(f"ReverseTunnel.start() incl. ssh connect: {time.perf_counter() - started:.3f} s")
            client = [sys.executable, "-c", CLIENT]
            measure("host, direct to 127.0.0.1 (no tunnel)", [*client, str(broker.port),
                                                              str(args.n)], env)
            measure("namespace, ReverseTunnel (paramiko)",
                    node.command([*client, str(tunnel.remote_port), str(args.n)]), env)
            proc, port = ssh_binary_tunnel(node, known, broker.port)
            try:
                measure("namespace, ssh -N -R (OpenSSH)",
                        node.command([*client, str(port), str(args.n)]), env)
            finally:
                proc.kill()
                proc.wait()
            node.kill_ssh_sessions()
            killed = time.perf_counter()
            ping = node.command(["redis-cli", "-p", str(tunnel.remote_port), "ping"])
            auth = {**env, "REDISCLI_AUTH": env["PW"]}
            while tunnel.reconnects < 1 or subprocess.run(
                    ping, env=auth, capture_output=True, text=True).stdout != "PONG\n":
                time.sleep(0.02)
            print(f"recovery after killing the sshd session (default back-off): "
                  f"{time.perf_counter() - killed:.2f} s")
            tunnel.stop()
            ssh.close()
        finally:
            broker.stop()
            node.cleanup()


if __name__ == "__main__":
    main()
