"""A real Sentinel-managed Redis for tests: a master, replicas and three sentinels, all
redis-server on loopback, with the settings /work/shared/SERVICES.md verified here
(diskless sync without delay, 1 s down-after, ready only once every sentinel knows
every replica: a master killed before that is never failed over)."""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from mainboard.redisclient import SentinelTarget, sentinel_url
from tests.services import free_port, require, wait_port

READY_S = 60.0


@dataclass
class SentinelSet:
    """The processes of one set and the URL mainboard reaches it by."""

    master: str
    data_ports: list[int]
    sentinel_ports: list[int]
    procs: dict[int, subprocess.Popen] = field(repr=False)

    @property
    def url(self) -> str:
        return sentinel_url(SentinelTarget(
            tuple(("127.0.0.1", p) for p in self.sentinel_ports), self.master))

    @property
    def entries(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.sentinel_ports]

    def master_port(self) -> int:
        """The data port the first answering sentinel names as master now."""
        with redis.Redis(port=self.sentinel_ports[0], socket_timeout=2) as s:
            _host, port = s.sentinel_get_master_addr_by_name(self.master)
        return int(port)

    def kill(self, port: int) -> None:
        """SIGKILL the data node on ``port`` and reap it."""
        self.procs[port].send_signal(signal.SIGKILL)
        self.procs[port].wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _data_node(binary: str, directory: Path, port: int, master: int | None) -> subprocess.Popen:
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--dir", str(directory),
            "--logfile", str(directory / f"redis-{port}.log")]
    if master is not None:
        args += ["--replicaof", "127.0.0.1", str(master)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _ready(s: SentinelSet, replicas: int) -> bool:
    """Every sentinel sees the 2 others and every replica online (SERVICES.md)."""
    try:
        with redis.Redis(port=s.data_ports[0], socket_timeout=2) as m:
            if m.info("replication").get("connected_slaves") != replicas:
                return False
        for port in s.sentinel_ports:
            with redis.Redis(port=port, socket_timeout=2) as sentinel:
                if len(sentinel.sentinel_sentinels(s.master)) != len(s.sentinel_ports) - 1:
                    return False
                if len(sentinel.sentinel_slaves(s.master)) != replicas:
                    return False
    except redis.RedisError:
        return False
    return True


def start_sentinel_set(directory: Path, replicas: int = 1, master: str = "mbtest") -> SentinelSet:
    """Start the set and return once a failover would work."""
    binary = require("redis-server", "Sentinel is redis-server --sentinel")
    directory.mkdir(parents=True, exist_ok=True)
    data = [free_port() for _ in range(replicas + 1)]
    procs = {data[0]: _data_node(binary, directory, data[0], None)}
    wait_port("127.0.0.1", data[0])
    for port in data[1:]:
        procs[port] = _data_node(binary, directory, port, data[0])
    sentinels = [free_port() for _ in range(3)]
    for port in sentinels:
        conf = directory / f"sentinel-{port}.conf"  # Sentinel rewrites its own conf
        conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
                        f"logfile {directory / f'sentinel-{port}.log'}\n"
                        f"sentinel monitor {master} 127.0.0.1 {data[0]} 2\n"
                        f"sentinel down-after-milliseconds {master} 1000\n"
                        f"sentinel failover-timeout {master} 5000\n")
        procs[port] = subprocess.Popen([binary, str(conf), "--sentinel"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    found = SentinelSet(master, data, sentinels, procs)
    deadline = time.monotonic() + READY_S
    while not _ready(found, replicas):
        if time.monotonic() > deadline:
            found.stop()
            raise TimeoutError(f"sentinel set in {directory} not ready after {READY_S:.0f}s")
        time.sleep(0.2)  # polling a state (INFO, SENTINEL replies), not waiting out a time
    return found

