"""A real Sentinel-managed Redis for tests: the product's local set
(:mod:`mainboard.services.sentinels`, what ``mainboard broker up --replicas N`` starts) under
a test directory, with the handles the tests need (ports, the master now, SIGKILL a node)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

import redis

from mainboard.redisclient import SentinelTarget, sentinel_url
from mainboard.services.broker import find_redis_server
from mainboard.services.sentinels import LocalSentinelSet, Node
from tests.support.services import require


@dataclass
class SentinelSet:
    """The processes of one set and the URL mainboard reaches it by."""

    master: str
    data_ports: list[int]
    sentinel_ports: list[int]
    local: LocalSentinelSet
    nodes: dict[int, Node]  # port -> its node

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
        """SIGKILL the data node on ``port`` and wait until it is gone."""
        node = self.nodes[port]
        pid = node.running_pid()
        assert pid is not None, f"no node of the set runs on port {port}"
        os.kill(pid, signal.SIGKILL)
        assert node._wait_gone(pid, 10), f"pid {pid} outlived SIGKILL"

    def stop(self) -> None:
        self.local.down()


def start_sentinel_set(directory: Path, replicas: int = 1) -> SentinelSet:
    """Start the set and return once a failover would work."""
    require("redis-server", "Sentinel is redis-server --sentinel")
    local = LocalSentinelSet(directory)
    shown = local.up(replicas, find_redis_server())
    nodes = {n.name: n for n in (Node(local.state_dir, name) for name in
                                 ["master", *(f"replica-{i}" for i in range(1, replicas + 1)),
                                  "sentinel-1", "sentinel-2", "sentinel-3"])}
    by_port = {n.port: n for n in nodes.values() if n.port and n.running_pid()}
    assert len(by_port) == len(nodes), f"not every node of the set runs: {sorted(by_port)}"
    data = [port for port, n in by_port.items() if not n.name.startswith("sentinel-")]
    return SentinelSet(shown.master_name, data,
                       [int(e.rsplit(":", 1)[1]) for e in shown.sentinels], local, by_port)
