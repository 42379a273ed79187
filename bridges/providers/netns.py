"""SIMULATION support: a "rented machine" made of a network namespace, a veth pair and an sshd.

Used only by the simulated provider. Each sandbox gets its own /30 from 10.77.100.0 to
10.77.199.255 (the host end is .1, the machine .2), chosen under a machine-wide lock
so concurrent simulators never pick the same one, and skipping any network already
routed on this host. The sshd runs inside the namespace (and its own UTS namespace,
so ``hostname`` differs) listening only on the namespace address; the host's loopback
services are unreachable from inside, as from a real rented box. Every command is an
argv list: no user value is ever parsed by a shell.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mainboard.errors import SandboxError

FIRST, LAST = ipaddress.ip_address("10.77.100.0"), ipaddress.ip_address("10.77.199.252")
LOCK_FILE = Path("/run/lock/mainboard-simulated-net.lock")


@dataclass
class Sandbox:
    """Everything needed to find and remove one simulated machine, even from another process."""

    netns: str
    veth_host: str
    veth_ns: str
    host_addr: str
    ns_addr: str
    hostname: str
    dir: str
    sshd_config: str
    pid: int | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS``; failures raise SandboxError with ip's own message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise SandboxError(f"simulated provider: `ip {' '.join(args)}` failed: "
                           f"{done.stderr.strip() or done.returncode}")
    return done


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Networks this host already routes or has addresses in (our /30s must not overlap)."""
    found: list[ipaddress.IPv4Network] = []
    for line in _ip("-4", "-o", "addr", "show").stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            found.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    for line in _ip("-4", "route", "show", "table", "all").stdout.splitlines():
        word = line.split()[0] if line.split() else ""
        if word and word[0].isdigit():
            try:
                found.append(ipaddress.ip_network(word, strict=False))
            except ValueError:
                continue
    return found


def _free_subnet() -> ipaddress.IPv4Network:
    used = _used_networks()
    address = FIRST
    while address <= LAST:
        candidate = ipaddress.ip_network(f"{address}/30")
        if not any(candidate.overlaps(net) for net in used if net.prefixlen > 0):
            return candidate
        address += 4
    raise SandboxError("simulated provider: no free /30 left in 10.77.100.0-10.77.199.255")


def _sshd_config(sandbox: Sandbox, host_key: Path) -> str:
    directory = Path(sandbox.dir)
    return "\n".join([
        "Port 22", f"ListenAddress {sandbox.ns_addr}", f"HostKey {host_key}",
        f"PidFile {directory / 'sshd.pid'}", f"AuthorizedKeysFile {directory / 'authorized_keys'}",
        "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password", "UsePAM no",
        "StrictModes no", "Subsystem sftp internal-sftp", "LogLevel VERBOSE", ""])


def plan(directory: Path, token: str, hostname: str) -> Sandbox:
    """Names and paths of a sandbox, recorded before anything exists so a crash can clean up."""
    return Sandbox(netns=f"mbsim-{token}", veth_host=f"mbs{token}h", veth_ns=f"mbs{token}n",
                   host_addr="", ns_addr="", hostname=hostname, dir=str(directory),
                   sshd_config=str(directory / "sshd_config"))


def create(sandbox: Sandbox) -> Sandbox:
    """Namespace + veth + addresses for a planned sandbox; then ``start_sshd``."""
    Path(sandbox.dir).mkdir(parents=True, exist_ok=True)
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Traffic to a destroyed sandbox's address must die here, never follow the
        # default route off this machine: a blackhole under the more specific /30s.
        _ip("route", "replace", "blackhole", "10.77.0.0/16")
        net = _free_subnet()
        sandbox.host_addr, sandbox.ns_addr = (str(a) for a in list(net.hosts())[:2])
        try:
            _ip("netns", "add", sandbox.netns)
            _ip("-n", sandbox.netns, "link", "set", "lo", "up")
            _ip("link", "add", sandbox.veth_host, "type", "veth", "peer", "name", sandbox.veth_ns)
            _ip("link", "set", sandbox.veth_ns, "netns", sandbox.netns)
            _ip("addr", "add", f"{sandbox.host_addr}/30", "dev", sandbox.veth_host)
            _ip("link", "set", sandbox.veth_host, "up")
            _ip("-n", sandbox.netns, "addr", "add", f"{sandbox.ns_addr}/30", "dev",
                sandbox.veth_ns)
            _ip("-n", sandbox.netns, "link", "set", sandbox.veth_ns, "up")
        except BaseException:
            destroy(sandbox)
            raise
    return sandbox


def start_sshd(sandbox: Sandbox, timeout: float = 10.0) -> subprocess.Popen[bytes]:
    """Host key, config and an sshd inside the namespace; returns once it accepts TCP."""
    directory = Path(sandbox.dir)
    host_key = directory / "host_ed25519"
    if not host_key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)],
                       check=True, stdout=subprocess.DEVNULL, timeout=30)
    keys = directory / "authorized_keys"
    keys.touch()
    keys.chmod(0o644)  # read as the login user by sshd
    Path(sandbox.sshd_config).write_text(_sshd_config(sandbox, host_key))
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    log = (directory / "sshd.log").open("ab")
    # ip netns exec -> unshare -> sh -> exec sshd: all exec in place, so the pid is sshd's.
    proc = subprocess.Popen(
        ["ip", "netns", "exec", sandbox.netns, "unshare", "--uts", "/bin/sh", "-c",
         'hostname "$1" && exec "$2" -D -f "$3" -E "$4"', "sh", sandbox.hostname, sshd,
         sandbox.sshd_config, str(directory / "sshd.log")],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    sandbox.pid = proc.pid
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (directory / "sshd.log").read_text(errors="replace")[-500:]
            raise SandboxError(f"simulated provider: sshd in {sandbox.netns} exited with "
                               f"{proc.returncode}: {tail.strip()}")
        try:
            with socket.create_connection((sandbox.ns_addr, 22), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.05)
    raise SandboxError(f"simulated provider: sshd in {sandbox.netns} did not listen on "
                       f"{sandbox.ns_addr}:22 within {timeout:g}s")


def authorize(sandbox: Sandbox, key_line: str) -> None:
    """Append one (already validated, single-line) public key to the machine's authorized_keys."""
    with (Path(sandbox.dir) / "authorized_keys").open("a") as fh:
        fh.write(key_line.strip() + "\n")


def _is_our_sshd(pid: int, config: str) -> bool:
    """Guard against pid reuse: only signal a process whose command line names our config."""
    try:
        return config.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _kill(pids: list[int], grace: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie is reaped if it is our child, and counts as gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def destroy(sandbox: Sandbox) -> None:
    """Kill sshd and everything else running in the namespace, then remove veth and netns.

    Idempotent: parts already gone are skipped, so a half-built or half-removed
    sandbox (a crash at any point) is always cleaned by calling this again.
    """
    pids = [int(p) for p in _ip("netns", "pids", sandbox.netns, check=False).stdout.split()
            if p.isdigit()]
    if sandbox.pid and _is_our_sshd(sandbox.pid, sandbox.sshd_config):
        pids.append(sandbox.pid)
    _kill(sorted(set(pids)))
    if _ip("link", "show", sandbox.veth_host, check=False).returncode == 0:
        _ip("link", "del", sandbox.veth_host)
    if sandbox.netns in namespaces():
        _ip("netns", "del", sandbox.netns)
    shutil.rmtree(sandbox.dir, ignore_errors=True)


def namespaces() -> set[str]:
    """Names in ``ip netns list`` (each line is ``NAME`` or ``NAME (id: N)``)."""
    return {line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()}


def alive(pid: int | None) -> bool:
    """Public form of the liveness check (tests and the server use it)."""
    return pid is not None and pid > 0 and _alive(pid)
