"""Real services for tests, as importable functions (the rq habit).

Each ``start_*`` function starts a real process on loopback on a free port and
returns a handle with ``stop()``. ``require`` skips a test locally when a program
is missing but fails it under ``CI=true``: in CI a missing service is a defect.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require(program: str, why: str = "") -> str:
    """Path of ``program``; skip (locally) or fail (under CI=true) when it is missing."""
    found = shutil.which(program) or next(
        (p for p in (f"/usr/sbin/{program}", f"/usr/bin/{program}") if os.path.exists(p)), None)
    if found:
        return found
    msg = f"{program} not installed{': ' + why if why else ''} (run the README test command)"
    if IN_CI:
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)
    raise AssertionError("unreachable")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(host: str, port: int, timeout: float = 10.0) -> None:
    """Block until something accepts TCP connections on host:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class RedisServer:
    """A private redis-server on loopback."""

    port: int
    password: str | None
    dir: Path
    proc: subprocess.Popen = field(repr=False)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        _terminate(self.proc)


def start_redis(directory: Path, password: str | None = None) -> RedisServer:
    """Start redis-server on a free loopback port with its data in ``directory``."""
    binary = require("redis-server")
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = directory / "redis.conf"
    lines = [f"port {port}", "bind 127.0.0.1", "save ''", "appendonly no",
             f"dir {directory}", "daemonize no", f"logfile {directory / 'redis.log'}"]
    if password:
        lines.append(f"requirepass {password}")
    conf.write_text("\n".join(lines) + "\n")
    conf.chmod(0o600)
    proc = subprocess.Popen([binary, str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_port("127.0.0.1", port)
    return RedisServer(port=port, password=password, dir=directory, proc=proc)


@dataclass
class SshServer:
    """A real OpenSSH sshd on loopback that accepts one client key for ``user``."""

    host: str
    port: int
    user: str
    identity: Path
    host_key_line: str
    dir: Path
    proc: subprocess.Popen = field(repr=False)

    def known_hosts(self, path: Path | None = None) -> Path:
        """Write a known_hosts file that trusts this server and return its path."""
        path = path or self.dir / "known_hosts"
        path.write_text(f"[{self.host}]:{self.port} {self.host_key_line}\n")
        return path

    def stop(self) -> None:
        _terminate(self.proc)


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True, stdout=subprocess.DEVNULL)


def start_sshd(directory: Path, user: str = "root") -> SshServer:
    """Start sshd on a free loopback port; the client key is ``directory/client_ed25519``."""
    sshd = require("sshd", "apt-get install openssh-server")
    require("ssh-keygen")
    directory.mkdir(parents=True, exist_ok=True)
    host_key, client_key = directory / "host_ed25519", directory / "client_ed25519"
    if not host_key.exists():
        _keygen(host_key)
    if not client_key.exists():
        _keygen(client_key)
    auth = directory / "authorized_keys"
    auth.write_text((directory / "client_ed25519.pub").read_text())
    auth.chmod(0o644)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = directory / "sshd_config"
    conf.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"PidFile {directory / 'sshd.pid'}\nAuthorizedKeysFile {auth}\n"
        "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\n"
        "MaxStartups 100:30:200\nMaxSessions 50\nSubsystem sftp internal-sftp\n")
    proc = subprocess.Popen([sshd, "-f", str(conf), "-D", "-E", str(directory / "sshd.log")])
    wait_port("127.0.0.1", port)
    key_type, key_b64 = (directory / "host_ed25519.pub").read_text().split()[:2]
    return SshServer(host="127.0.0.1", port=port, user=user, identity=client_key,
                     host_key_line=f"{key_type} {key_b64}", dir=directory, proc=proc)
