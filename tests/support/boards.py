"""Helpers for Board tests: write a real mainboard.toml declaring hosts (no config objects faked)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cliserver import popen_mainboard
from tests.support.services import SshServer

TomlValue = str | int | float | bool


def write_config(directory: Path, hosts: dict[str, dict[str, TomlValue]],
                 extra: str = "") -> Path:
    """A mainboard.toml in ``directory`` declaring ``hosts``; names and values are TOML-quoted."""
    lines = []
    for name, keys in hosts.items():
        lines.append(f"[hosts.{json.dumps(name)}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
        lines.append("")
    path = directory / "mainboard.toml"
    path.write_text("\n".join(lines) + extra)
    return path


def ssh_host(server: SshServer, known_hosts: Path, **overrides: TomlValue) -> dict[str, TomlValue]:
    """The [hosts.X] keys that reach ``server`` with its client key and ``known_hosts``."""
    keys: dict[str, TomlValue] = {
        "kind": "ssh", "host": server.host, "port": server.port, "user": server.user,
        "identity": str(server.identity), "known_hosts": str(known_hosts),
        "connect_timeout": 5.0,
    }
    keys.update(overrides)
    return keys


def process_gone(pid: int, patience: float = 120.0) -> bool:
    """True once ``pid`` has exited (gone or a zombie); a SIGKILL lands asynchronously. The
    callers' processes sleep 600 s, so ``patience`` only bounds how long a failure takes."""
    deadline = time.monotonic() + patience
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in {"Z", "X"}:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def interrupt_cli_run(args: list[str], pidfile: Path, cwd: Path) -> tuple[int, int]:
    """Start `mainboard <args>` whose command writes a background child's pid to ``pidfile``,
    press Ctrl-C (SIGINT) once it has, and return (exit code, that child's pid)."""
    proc = popen_mainboard([*args], cwd=cwd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (pidfile.exists() and pidfile.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"`mainboard {' '.join(args)}` wrote no pid to {pidfile} "
                        f"(exit {proc.wait()}): {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    proc.wait(60)
    return proc.returncode, int(pidfile.read_text())
