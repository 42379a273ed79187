"""A local Sentinel-managed broker: ``mainboard broker up --replicas N``.

For tests and small sites that want to ride out the loss of the broker's process
(issue 29): a master, N replicas and three sentinels, all redis-server on loopback, each
a :class:`~mainboard.daemon.Daemon` with its config, data, log and pid under
``.mainboard/sentinels/<node>/``. Settings as /work/shared/SERVICES.md verified them:
diskless sync without delay, a master down after 1 s, ready only once every sentinel
knows the two others and every replica (a master killed before that is never failed
over). The set has no password: Redis Sentinel's ``[broker] sentinels`` form carries
none, so it binds 127.0.0.1 only, like the embedded broker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from mainboard.daemon import HOST, Daemon, fresh_port
from mainboard.errors import BrokerError
from mainboard.locks import flocked

MASTER = "mainboard"  # the master's name the sentinels monitor
SENTINELS = 3
QUORUM = 2
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
READY_S = 60.0
STOP_S = 10.0


class Node(Daemon):
    """One redis-server of the set (a data node or a sentinel)."""

    program = "redis-server"
    error = BrokerError

    def __init__(self, state_dir: Path, name: str) -> None:
        super().__init__(state_dir, f"sentinels/{name}", secret="sentinels/unused.secret",
                         conf="redis.conf", log="redis.log", record=f"sentinels/{name}.json",
                         lock=f"sentinels/{name}.lock")
        self.name = name

    def _marks(self) -> tuple[str, ...]:
        return "redis-server", str(self.conf_path)

    @property
    def port(self) -> int | None:
        """The port it was last started on."""
        return self._recorded()[1]

    def start(self, binary: str, port: int, conf: str, sentinel: bool) -> int:
        """Write its config and start it; its pid once it answers PING."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.conf_path.write_text(conf)  # a sentinel rewrites its own config as it learns
        argv = [binary, str(self.conf_path), *(["--sentinel"] if sentinel else [])]
        with _client(port) as client:
            pid = self._start(argv, port, [], lambda: _pings(client))
        self._record(pid=pid, port=port, sentinel=sentinel)
        return pid

    def stop(self) -> None:
        """SIGTERM to our verified pid, then wait for it to be gone (SIGKILL at the end)."""
        pid = self.running_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        if not self._wait_gone(pid, STOP_S) and self._is_ours(pid):
            os.kill(pid, signal.SIGKILL)
            self._wait_gone(pid, STOP_S)


def _client(port: int, **extra: Any) -> redis.Redis:
    """A client of one node that fails fast: every caller polls or moves to the next node,
    so redis-py's retries with backoff (seconds per refused connect) only slow them."""
    return redis.Redis(host=HOST, port=port, socket_timeout=2, retry=Retry(NoBackoff(), 0),
                       **extra)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _data_conf(node: Node, port: int, master: int | None) -> str:
    lines = [f"port {port}", f"bind {HOST}", "protected-mode no", "daemonize no",
             "set-proc-title no", f'dir "{node.dir}"', f'logfile "{node.log_path}"',
             "appendonly yes", "appendfsync everysec", 'save ""',
             "repl-diskless-sync yes", "repl-diskless-sync-delay 0",
             "maxmemory-policy noeviction"]
    if master is not None:
        lines.append(f"replicaof {HOST} {master}")
    return "\n".join(lines) + "\n"


def _sentinel_conf(node: Node, port: int, master: int) -> str:
    return "\n".join([
        f"port {port}", f"bind {HOST}", "protected-mode no", "daemonize no",
        "set-proc-title no", f'dir "{node.dir}"', f'logfile "{node.log_path}"',
        f"sentinel monitor {MASTER} {HOST} {master} {QUORUM}",
        f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}",
        f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}"]) + "\n"


@dataclass
class SetStatus:
    """What the set's sentinels say now (``running``: a sentinel names a master)."""

    running: bool
    state_dir: str
    master_name: str = MASTER
    master: str | None = None            # HOST:PORT the sentinels name as master now
    replicas: list[str] = field(default_factory=list)
    sentinels: list[str] = field(default_factory=list)
    action: str | None = None            # started | already running | stopped | not running
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the set has no password to hide)."""
        return {"state": "running" if self.running else "stopped", **self.__dict__}

    def toml(self) -> str:
        """The ``[broker]`` lines that point a workspace at the set."""
        return (f"[broker]\nsentinels = {json.dumps(self.sentinels)}\n"
                f"master = {json.dumps(self.master_name)}\n")


class LocalSentinelSet:
    """The set of a workspace's ``state_dir``: started, asked about, stopped as one."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir).absolute()
        self.root = self.state_dir / "sentinels"
        self.record_path = self.root / "set.json"

    def _nodes(self) -> list[Node]:
        try:
            names = json.loads(self.record_path.read_text())["nodes"]
        except (OSError, ValueError, KeyError, TypeError):
            return []
        return [Node(self.state_dir, str(name)) for name in names]

    def recorded(self) -> bool:
        """Whether a set was started here and not stopped."""
        return self.record_path.exists()

    def up(self, replicas: int, binary: str) -> SetStatus:
        """Start the set (or report the one running); return once a failover would work.
        ``replicas`` >= 1, as `broker up --replicas` checks."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        with flocked(self.root / "set.lock"):
            current = self.status()
            if current.running:
                return SetStatus(**{**current.__dict__, "action": "already running"})
            self._stop_nodes()
            names = ["master", *(f"replica-{i}" for i in range(1, replicas + 1)),
                     *(f"sentinel-{i}" for i in range(1, SENTINELS + 1))]
            self.record_path.write_text(json.dumps({"nodes": names, "replicas": replicas}))
            try:
                self._start(names, replicas, binary)
            except BaseException:
                self._stop_nodes()
                self.record_path.unlink(missing_ok=True)
                raise
        return SetStatus(**{**self.status().__dict__, "action": "started"})

    def _start(self, names: list[str], replicas: int, binary: str) -> None:
        nodes = [Node(self.state_dir, name) for name in names]
        master = fresh_port()
        nodes[0].start(binary, master, _data_conf(nodes[0], master, None), False)
        for node in nodes[1:1 + replicas]:
            port = fresh_port()
            node.start(binary, port, _data_conf(node, port, master), False)
        for node in nodes[1 + replicas:]:
            port = fresh_port()
            node.start(binary, port, _sentinel_conf(node, port, master), True)
        deadline = time.monotonic() + READY_S
        while not self._ready(master, [n.port or 0 for n in nodes[1 + replicas:]], replicas):
            if time.monotonic() > deadline:
                raise BrokerError(f"the sentinel set in {self.root} did not settle within "
                                  f"{READY_S:.0f}s (replicas or sentinels not all seen); see "
                                  "the redis.log files there")
            time.sleep(0.2)  # polling INFO and SENTINEL replies, not waiting out a time

    @staticmethod
    def _ready(master: int, sentinels: list[int], replicas: int) -> bool:
        """The master has every replica and every sentinel sees the others and them."""
        try:
            with _client(master) as client:
                if client.info("replication").get("connected_slaves") != replicas:
                    return False
            for port in sentinels:
                with _client(port) as sentinel:
                    if len(sentinel.sentinel_sentinels(MASTER)) != len(sentinels) - 1 or \
                            len(sentinel.sentinel_slaves(MASTER)) != replicas:
                        return False
        except redis.RedisError:
            return False
        return True

    def status(self) -> SetStatus:
        """The set as its first answering sentinel sees it."""
        base = SetStatus(running=False, state_dir=str(self.state_dir))
        nodes = self._nodes()
        sentinels = [n for n in nodes if n.name.startswith("sentinel-")]
        base.sentinels = [f"{HOST}:{n.port}" for n in sentinels if n.port]
        for node in sentinels:
            if node.running_pid() is None or not node.port:
                continue
            try:
                with _client(node.port, decode_responses=True) as sentinel:
                    host, port = sentinel.sentinel_get_master_addr_by_name(MASTER)
                    seen = sentinel.sentinel_slaves(MASTER)
            except (redis.RedisError, TypeError):
                continue
            base.master, base.running = f"{host}:{port}", True
            base.replicas = sorted(f"{r['ip']}:{r['port']}" for r in seen
                                   if "s_down" not in str(r.get("flags", "")))
            return base
        if nodes:
            base.note = "no sentinel of the set answers"
        return base

    def down(self) -> SetStatus:
        """Stop every node of the set (data kept under .mainboard/sentinels)."""
        if not self.recorded():
            return SetStatus(False, str(self.state_dir), action="not running")
        with flocked(self.root / "set.lock"):
            shown = self.status()
            self._stop_nodes()
            self.record_path.unlink(missing_ok=True)
        return SetStatus(**{**shown.__dict__, "running": False, "action": "stopped"})

    def _stop_nodes(self) -> None:
        for node in reversed(self._nodes()):  # sentinels first: no failover while stopping
            with contextlib.suppress(OSError):
                node.stop()


__all__ = ["MASTER", "LocalSentinelSet", "SetStatus"]
