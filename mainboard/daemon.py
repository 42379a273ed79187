"""Process, port and secret-file helpers shared by the workspace's daemons (broker, Flower).

Both start a loopback service in its own session, keep its password in a 0600 file,
remember its pid and port, and must never signal a process that is not theirs.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from pathlib import Path

HOST = "127.0.0.1"
FORBIDDEN_PORTS = frozenset({6379})  # a foreign Redis may own the default port


def port_is_free(port: int) -> bool:
    """True if a server setting SO_REUSEADDR (redis, tornado) could bind 127.0.0.1:port now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def fresh_port() -> int:
    """A free loopback port chosen by the kernel, never a forbidden one."""
    while True:
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port not in FORBIDDEN_PORTS:
            return port


def process_cmdline(pid: int) -> str | None:
    """Command line of a live (non-zombie) process, or None if it is gone."""
    proc = Path(f"/proc/{pid}")
    if Path("/proc/self").is_dir():
        try:
            if (proc / "stat").read_text().rpartition(")")[2].split()[:1] == ["Z"]:
                return None
            raw = (proc / "cmdline").read_bytes()
        except OSError:
            return None
        return raw.replace(b"\0", b" ").decode(errors="replace").strip() or None
    # no /proc (macOS): ask ps; a zombie shows state Z
    try:
        done = subprocess.run(["ps", "-o", "stat=,command=", "-p", str(pid)],
                              capture_output=True, text=True, check=False)
    except OSError:  # no ps either: we cannot prove it is ours, so never treat it as ours
        return None
    line = done.stdout.strip()
    if done.returncode != 0 or not line or line.startswith("Z"):
        return None
    return line.split(None, 1)[1] if " " in line else None


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` created with mode 0600 (and re-tightened if it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(0o600)


def read_secret(path: Path) -> str | None:
    """The secret in ``path`` (re-tightened to 0600), None if the file is absent or empty."""
    try:
        path.chmod(0o600)
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def read_or_create_secret(path: Path, nbytes: int = 24) -> str:
    """The secret in ``path``, or a new random one in a fresh 0600 file.

    ``token_urlsafe`` gives [A-Za-z0-9_-]: safe in redis.conf and Flower's "user:pw" list.
    """
    existing = read_secret(path)
    if existing:
        return existing
    secret = secrets.token_urlsafe(nbytes)
    write_private(path, secret + "\n")
    return secret


def log_tail(path: Path, offset: int, hide: list[str]) -> str:
    """The last three log lines written since ``offset``, with every secret in ``hide`` scrubbed."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    for secret in hide:
        text = text.replace(secret, "***") if secret else text
    return " | ".join(line.strip() for line in text.strip().splitlines()[-3:])


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists on this machine (signal 0; another user's process counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
