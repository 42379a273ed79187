"""Latency of `board.on(ssh).run('true')` (pooled paramiko) vs the `ssh` binary, same loopback sshd.

Run from the repository root:  .venv/bin/python bench/bench_ssh.py [-n 50]
Starts its own sshd on a free 127.0.0.1 port (tests/support/services.start_sshd), measures N
warm pooled runs and N fresh `ssh ... true` processes, prints medians, p90 and the ratio.
Both pay the same remote cost (sshd session + the login shell's startup files).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support.services

from mainboard.board import Board  # noqa: E402
from tests.support.services import start_sshd  # noqa: E402


def _interleaved(calls: dict[str, Callable[[], object]], n: int) -> dict[str, list[float]]:
    """Wall seconds of ``n`` rounds, each calling every method once, so load drifts hit all alike."""
    out: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(n):
        for label, call in calls.items():
            start = time.perf_counter()
            call()
            out[label].append(time.perf_counter() - start)
    return out


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def _row(label: str, values: list[float]) -> str:
    return (f"{label:<34} median {statistics.median(values) * 1e3:8.1f} ms   "
            f"p90 {_p90(values) * 1e3:8.1f} ms   (n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=30, help="calls per method (default 30)")
    args = parser.parse_args()
    if shutil.which("ssh") is None:
        sys.exit("bench_ssh: the `ssh` binary is not installed (apt-get install openssh-client)")
    work = Path(tempfile.mkdtemp(prefix="mainboard-bench-ssh-"))
    server = start_sshd(work / "sshd")
    try:
        known = server.known_hosts()
        (work / "mainboard.toml").write_text(
            f'[hosts.box]\nkind = "ssh"\nhost = "{server.host}"\nport = {server.port}\n'
            f'user = "{server.user}"\nidentity = "{server.identity}"\n'
            f'known_hosts = "{known}"\nroot = "{work / "root"}"\n')
        ssh_argv = ["ssh", "-i", str(server.identity), "-p", str(server.port),
                    "-o", f"UserKnownHostsFile={known}", "-o", "BatchMode=yes",
                    "-o", "StrictHostKeyChecking=yes", "-F", "/dev/null",
                    f"{server.user}@{server.host}", "true"]
        rc = Path(os.path.expanduser(f"~{server.user}")) / ".bashrc"
        with Board(work / "mainboard.toml") as board:
            box = board.on("box")
            start = time.perf_counter()
            box.run("true", check=True)  # connect + handshake + first command
            first = time.perf_counter() - start
            calls: dict[str, Callable[[], object]] = {
                "board.on(ssh).run('true') pooled": lambda: box.run("true", check=True),
                "ssh binary, fresh process": lambda: subprocess.run(ssh_argv, check=True),
            }
            if rc.is_file():  # bash sources it for every sshd command: both methods pay it
                calls["  remote ~/.bashrc alone"] = lambda: subprocess.run(
                    ["bash", "-c", f". {rc}; true"], check=True)
            times = _interleaved(calls, args.n)
        pooled, fresh = times["board.on(ssh).run('true') pooled"], times["ssh binary, fresh process"]
        print(f"loopback sshd 127.0.0.1:{server.port}, user {server.user}")
        print(f"{'board first call (connect)':<34} {first * 1e3:8.1f} ms")
        for label, values in times.items():
            print(_row(label, values))
        ratio = statistics.median(fresh) / statistics.median(pooled)
        print(f"ratio ssh/board (median): {ratio:.2f}x  (p90: {_p90(fresh) / _p90(pooled):.2f}x)")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
