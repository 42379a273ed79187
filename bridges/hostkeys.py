"""known_hosts checks for the ssh bridge: refuse, record on first use, and explain a change.

Lines are read in OpenSSH's format (plain or hashed ``|1|`` names, ``[host]:port`` for
non-22 ports) so users can fix them with ``ssh-keygen -R``.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeyEntry, HostKeys

from mainboard.errors import HostKeyMismatch

_APPEND_LOCK = threading.Lock()


def known_hosts_name(host: str, port: int) -> str:
    """The name a known_hosts line uses: ``host`` on port 22, else ``[host]:port``."""
    return host if port == 22 else f"[{host}]:{port}"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint, what ``ssh-keygen -lf`` prints."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_lines(path: Path, name: str) -> list[tuple[int, str, str]]:
    """(line number, key type, fingerprint) of every line in ``path`` that names ``name``."""
    if not path.is_file():
        return []
    found = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        try:
            entry = HostKeyEntry.from_line(line, number)
        except Exception:  # noqa: BLE001 - a line paramiko cannot parse is not ours to judge
            entry = None
        if entry is None or entry.key is None:
            continue
        for pattern in entry.hostnames:
            hashed = pattern.startswith("|1|")
            if (HostKeys.hash_host(name, pattern) == pattern) if hashed else pattern == name:
                found.append((number, entry.key.get_name(), fingerprint(entry.key)))
                break
    return found


def _fix(name: str, path: Path) -> str:
    return f"ssh-keygen -R '{name}' -f {path}"


def mismatch_error(host_name: str, host: str, port: int, seen: paramiko.PKey,
                   path: Path) -> HostKeyMismatch:
    """The refusal for a key that differs from the one recorded: what, where, how to fix."""
    name = known_hosts_name(host, port)
    recorded = known_lines(path, name)
    where = ", ".join(f"{path}:{n} ({kind} {fp})" for n, kind, fp in recorded) or str(path)
    return HostKeyMismatch(
        f"{host_name}: host key for {name} CHANGED: the server offered {seen.get_name()} "
        f"{fingerprint(seen)} but {where} records another; refused (someone may be "
        f"intercepting). If the change is expected, remove the old line with "
        f"`{_fix(name, path)}` and connect again")


def check_unknown_key(host_name: str, host: str, port: int, key: paramiko.PKey, path: Path,
                      first_use: bool) -> None:
    """Accept and record a never-seen key when ``first_use``; otherwise raise HostKeyMismatch."""
    name = known_hosts_name(host, port)
    if known_lines(path, name):
        # Recorded under a key type paramiko did not negotiate: still a changed key.
        raise mismatch_error(host_name, host, port, key, path)
    if not first_use:
        raise HostKeyMismatch(
            f"{host_name}: host key for {name} ({key.get_name()} {fingerprint(key)}) is not in "
            f"{path}; refused. Check the fingerprint with the host's admin, then add it with "
            f"`ssh-keyscan -p {port} {host} >> {path}`, or set trust = \"first-use\" for this "
            "host to record it on the first connection")
    line = f"{name} {key.get_name()} {key.get_base64()}\n"
    with _APPEND_LOCK:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        existing = path.read_bytes() if path.exists() else b""
        with path.open("a") as handle:
            if existing and not existing.endswith(b"\n"):
                handle.write("\n")
            handle.write(line)
        if not existing:
            path.chmod(0o600)

