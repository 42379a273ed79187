"""An embedded broker's secrets and refusals, as the ACL and fleet tests read them."""

from __future__ import annotations

from pathlib import Path

import redis

from mainboard.services.broker import EmbeddedBroker


def passwords(state: Path) -> list[str]:
    """The coordinator's and the worker's passwords of a workspace's embedded broker."""
    return [(state / name).read_text().strip()
            for name in ("broker.secret", "broker-worker.secret")]


def acl_denials(broker: EmbeddedBroker) -> list[str]:
    """``ACL LOG`` as ``user reason object`` lines (empty: nobody was refused anything)."""
    with redis.Redis.from_url(broker.url(), decode_responses=True) as admin:
        return [f"{e['username']} {e['reason']} {e['object']}" for e in admin.acl_log()]
