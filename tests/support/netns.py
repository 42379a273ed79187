"""Network namespaces as "remote" test hosts: their own address, their own loopback.

``make_netns_host(name, subnet_index, directory)`` makes a namespace with a veth pair
(host side 10.78.N.1/24, namespace side 10.78.N.2/24), ``lo`` up, and a real sshd
started INSIDE it on 10.78.N.2 (optionally in its own UTS namespace, with its own
hostname). Processes in there cannot reach the host's 127.0.0.1, just like a cluster
node behind NAT cannot reach a laptop's loopback Redis.
The simulated provider uses 10.77.0.0/16; these helpers use 10.78.0.0/16. Names start
with ``mbt-`` and namespaces end in the creating pid, so ``cleanup_stale`` removes only
what a crashed run left behind, never a concurrent run's hosts.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mainboard.daemon import pid_alive
from tests.support.services import SshServer, require, start_sshd, unavailable

PREFIX = "mbt-"
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,19}")


def require_netns() -> None:
    """Network namespaces need root, iproute2, unshare and sshd (skip locally, fail in CI)."""
    require("ip", "apt-get install iproute2")
    require("unshare", "apt-get install util-linux")
    require("sshd", "apt-get install openssh-server")
    if os.geteuid() != 0:
        unavailable("network namespaces need root")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc), children before grandchildren."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, queue = [], list(parents.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(parents.get(child, []))
    return found


def _kill_all_in(namespace: str) -> None:
    """SIGKILL every process inside ``namespace`` and wait (up to 5 s) until they are gone,
    so deleting it really frees it."""
    out = _ip("netns", "pids", namespace, check=False).stdout
    pids = [int(p) for p in out.split() if p.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_running(pid) for pid in pids):
        time.sleep(0.05)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie holds no namespace)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def free_subnet_index() -> int:
    """A random N in 1..254 whose 10.78.N.0/24 and ``mbt-hN`` link nobody uses now."""
    used_addrs = _ip("-4", "-o", "addr", "show").stdout
    used_links = _ip("-o", "link", "show").stdout
    taken = {int(n) for n in re.findall(r"10\.78\.(\d+)\.", used_addrs)}
    taken |= {int(n) for n in re.findall(rf"{PREFIX}[hn](\d+)\b", used_links)}
    free = [n for n in range(1, 255) if n not in taken]
    if not free:
        raise RuntimeError("every 10.78.N.0/24 is in use; run tests.support.netns.cleanup_stale()")
    return random.choice(free)


@dataclass
class NetnsHost:
    """A namespace with its veth pair and (once started) its sshd; ``cleanup()`` undoes all."""

    name: str
    index: int
    directory: Path
    hostname: str | None = None
    ssh: SshServer | None = field(default=None, repr=False)

    @property
    def addr(self) -> str:
        """The namespace's address, where its sshd listens."""
        return f"10.78.{self.index}.2"

    @property
    def host_addr(self) -> str:
        """The host side of the veth pair, as seen from inside."""
        return f"10.78.{self.index}.1"

    @property
    def veth_host(self) -> str:
        return f"{PREFIX}h{self.index}"

    @property
    def veth_ns(self) -> str:
        return f"{PREFIX}n{self.index}"

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: Sequence[str], *, env: dict[str, str] | None = None,
            input: str | None = None, timeout: float = 30.0,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the namespace (same filesystem, own network)."""
        return subprocess.run(self.command(argv), env=env, input=input, timeout=timeout,
                              capture_output=True, text=True, check=check)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[str]:
        """Start ``argv`` inside the namespace without waiting (pipes are text)."""
        return subprocess.Popen(self.command(argv), text=True, **kwargs)

    def start_sshd(self) -> SshServer:
        """(Re)start sshd inside on 10.78.N.2, same keys and port as before if any."""
        wrapper = self.command([])
        if self.hostname:
            wrapper += ["unshare", "--uts", "sh", "-c", 'hostname "$1" && shift && exec "$@"',
                        "sh", self.hostname]
        port = self.ssh.port if self.ssh else None
        self.ssh = start_sshd(self.directory, port=port, listen=self.addr, wrapper=wrapper)
        return self.ssh

    def signal_ssh_sessions(self, sig: signal.Signals = signal.SIGKILL) -> int:
        """Signal the sshd processes serving connections (not the listener): how many.

        SIGKILL cuts connections; SIGSTOP leaves them open but silent, like a dead peer
        behind a NAT that forgot us (SIGCONT brings them back)."""
        assert self.ssh is not None
        pids = _children(self.ssh.proc.pid)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return len(pids)

    def kill_ssh_sessions(self) -> int:
        """SIGKILL the sshd processes serving connections: how many."""
        return self.signal_ssh_sessions(signal.SIGKILL)

    def stop_sshd(self) -> None:
        """Stop the listener and every session it serves (the port stays reserved for restart)."""
        if self.ssh is not None:
            self.kill_ssh_sessions()
            self.ssh.stop()

    def cleanup(self) -> None:
        """Kill sshd and everything else inside, delete the veth pair and the namespace."""
        self.stop_sshd()
        _kill_all_in(self.name)
        _ip("link", "del", self.veth_host, check=False)
        _ip("netns", "del", self.name, check=False)


def make_netns_host(name: str, subnet_index: int, directory: Path, *,
                    hostname: str | None = None, sshd: bool = True) -> NetnsHost:
    """Namespace ``mbt-NAME-PID`` on 10.78.N.0/24 with sshd inside; cleaned up on failure."""
    require_netns()
    if not _NAME.fullmatch(name):
        raise ValueError(f"netns host name {name!r}: valid: lowercase letters, digits, '-', "
                         "at most 20 characters")
    if not 1 <= subnet_index <= 254:
        raise ValueError(f"subnet_index {subnet_index!r}: valid: 1..254 (10.78.N.0/24)")
    host = NetnsHost(f"{PREFIX}{name}-{os.getpid()}", subnet_index, directory, hostname)
    # A packet for a test host that is gone must die here, never take the default route
    # off this machine: a blackhole under the more specific /24s of live hosts.
    _ip("route", "replace", "blackhole", "10.78.0.0/16")
    try:
        _ip("netns", "add", host.name)
        _ip("link", "add", host.veth_host, "type", "veth", "peer", "name", host.veth_ns)
        _ip("link", "set", host.veth_ns, "netns", host.name)
        _ip("addr", "add", f"{host.host_addr}/24", "dev", host.veth_host)
        _ip("link", "set", host.veth_host, "up")
        for argv in (["ip", "link", "set", "lo", "up"],
                     ["ip", "addr", "add", f"{host.addr}/24", "dev", host.veth_ns],
                     ["ip", "link", "set", host.veth_ns, "up"]):
            host.run(argv, check=True)
        if sshd:
            host.start_sshd()
    except BaseException:
        host.cleanup()
        raise
    return host


def cleanup_stale(prefix: str = PREFIX) -> list[str]:
    """Remove ``prefix`` namespaces whose creating process is gone, and half-made veth
    pairs (both ends still in this namespace) from crashed runs; returns what went."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        owner = name.rsplit("-", 1)[-1]
        if not name.startswith(prefix) or (owner.isdigit() and pid_alive(int(owner))):
            continue
        _kill_all_in(name)
        peer_inside = re.compile(rf"link-netns {re.escape(name)}(?!\S)")
        removed += _delete_links(prefix, lambda line, p=peer_inside: p.search(line) is not None)
        _ip("netns", "del", name, check=False)
        removed.append(name)
    return removed + _delete_links(prefix, lambda line: "link-netns" not in line)


def _delete_links(prefix: str, matches: Callable[[str], bool]) -> list[str]:
    """Delete this namespace's ``prefix`` links whose ``ip -o link`` line ``matches``."""
    gone = []
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        found = re.match(r"\d+:\s+([^@:\s]+)", line)
        if found and found.group(1).startswith(prefix) and matches(line):
            _ip("link", "del", found.group(1), check=False)
            gone.append(found.group(1))
    return gone
