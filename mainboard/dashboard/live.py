"""What only Redis knows, asked without ever starting anything: which runs are live now
(their coordinator holds the lease), their current state, and the worker registry.

The dashboard must keep answering when the broker is down, so every call here is short
(0.5 s timeouts, no retries) and a failure becomes ``BrokerView(ok=False, ...)``: pages
then say so and show what the receipts hold.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from mainboard import keys
from mainboard.config import Config
from mainboard.errors import MainboardError, first_line
from mainboard.redact import redact_text
from mainboard.redisclient import redis_client
from mainboard.services.broker import EmbeddedBroker, address

TIMEOUT_S = 0.5


@dataclass
class BrokerView:
    """The broker as the dashboard last saw it: reachable or not, and why not."""

    ok: bool
    address: str
    message: str = ""
    checked: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "address": self.address, "message": self.message}


class Live:
    """The workspace's broker, read-only: lease and state of runs, registry of workers."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._client: redis.Redis | None = None
        self.url: str | None = None
        self.address = "no broker"

    def _connect(self) -> redis.Redis | None:
        """A client of ``[broker] url``, or of the embedded broker when it was ever started
        (never starting it: a dashboard that starts a broker would hide an outage)."""
        if self._client is not None:
            return self._client

        url = self.config.broker.url
        if not url:
            try:
                url = EmbeddedBroker(self.config.state_dir).url()
            except MainboardError:
                return None
        self.url, self.address = url, address(url)
        self._client = redis_client(url, socket_timeout=TIMEOUT_S,
                                    socket_connect_timeout=TIMEOUT_S,
                                    retry=Retry(NoBackoff(), 0))
        return self._client

    def probe(self) -> BrokerView:
        """PING the broker: ok, or one line naming it and the reason (no password)."""
        client = self._connect()
        if client is None:
            return BrokerView(False, "embedded broker", "the embedded broker was never started "
                              "and [broker] url is not set: showing receipts only")
        try:
            client.ping()
        except redis.RedisError as exc:
            return BrokerView(False, self.address, redact_text(
                f"broker {self.address} does not answer ({first_line(exc)}): showing what "
                "the receipts hold; pages recover by themselves once it is back"))
        return BrokerView(True, self.address)

    def run_states(self, run_ids: Iterable[str]) -> dict[str, dict[str, str]]:
        """``{run id: state hash + "live": "1" when a coordinator holds its lease}``; {} when
        the broker does not answer."""
        client = self._connect()
        ids = list(run_ids)
        if client is None or not ids:
            return {}
        try:
            with client.pipeline(transaction=False) as pipe:
                for run_id in ids:
                    pipe.exists(keys.run_lease(run_id))
                    pipe.hgetall(keys.run_state(run_id))
                replies = pipe.execute()
        except redis.RedisError:
            return {}
        out: dict[str, dict[str, str]] = {}
        for n, run_id in enumerate(ids):
            lease, state = replies[2 * n], replies[2 * n + 1]
            row = {k.decode(): v.decode(errors="replace") for k, v in state.items()}
            if lease:
                row["live"] = "1"
            out[run_id] = row
        return out

    def registry(self) -> list[dict[str, Any]]:
        """Every worker that ever beat on this broker (a week's memory), newest beat first."""
        client = self._connect()
        if client is None:
            return []
        try:
            beats = client.zrevrange(keys.workers_index(), 0, 999, withscores=True)
            with client.pipeline(transaction=False) as pipe:
                for node, _ in beats:
                    pipe.hgetall(keys.worker(node.decode()))
                hashes = pipe.execute()
        except redis.RedisError:
            return []
        rows = []
        for (node, beat), entry in zip(beats, hashes, strict=True):
            row: dict[str, Any] = {k.decode(): v.decode(errors="replace")
                                   for k, v in entry.items()}
            row["node"], row["beat"] = node.decode(), float(beat)
            rows.append(row)
        return rows

    def client(self) -> redis.Redis | None:
        """The raw client (for the run-log and worker-table readers), or None without a broker."""
        return self._connect()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


__all__ = ["BrokerView", "Live"]
