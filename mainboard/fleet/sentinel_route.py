"""A fleet worker on another machine and a Sentinel-managed broker: never a tunnel.

A reverse tunnel forwards one port, but the master of a Sentinel-managed broker moves on
a failover: a worker given one forwarded address would keep talking to a dead (or
demoted) node and never follow. So a remote worker gets the sentinel addresses themselves
(``[broker] sentinels``) and asks them for the master on each reconnect, as every other
client does. ``check_reachable`` asks the host, in one command, whether it reaches the
sentinels and the data nodes they name (the master now and its replicas: the next
master is one of them), and refuses in one line naming what it cannot reach.
"""

from __future__ import annotations

import redis

from mainboard.bridges.transport import Transport
from mainboard.errors import HostError
from mainboard.hosts.root import TAG, tagged
from mainboard.redisclient import parse_sentinel_url

VIA = "sentinels"  # a worker's ``broker_via`` when it follows the sentinels itself
CONNECT_S = 3
_CODE = ("import socket, sys\n"
         "bad = []\n"
         "for a in sys.argv[1:]:\n"
         "    h, _, p = a.rpartition(':')\n"
         "    try:\n"
         f"        socket.create_connection((h.strip('[]'), int(p)), {CONNECT_S}).close()\n"
         "    except OSError:\n"
         "        bad.append(a)\n"
         f"print({TAG!r} + ' '.join(bad))\n")


def _address(host: str, port: int | str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def data_nodes(url: str) -> list[str]:
    """HOST:PORT of the master the first answering sentinel names, then of the replicas it
    sees up; empty when no sentinel answers from here."""
    target = parse_sentinel_url(url)
    for host, port in target.sentinels:
        try:
            with redis.Redis(host=host, port=port, socket_timeout=CONNECT_S,
                             socket_connect_timeout=CONNECT_S, decode_responses=True) as s:
                master = s.sentinel_get_master_addr_by_name(target.master)
                replicas = s.sentinel_slaves(target.master)
        except (redis.RedisError, TypeError):
            continue
        if not master:
            continue
        return [_address(*master)] + [_address(r["ip"], r["port"]) for r in replicas
                                      if "s_down" not in str(r.get("flags", ""))]
    return []


def check_reachable(transport: Transport, python: str, name: str, url: str) -> None:
    """HostError in one line unless the host reaches a sentinel of ``url`` and every data
    node the sentinels name (``python``: an interpreter on the host)."""
    sentinels = [_address(h, p) for h, p in parse_sentinel_url(url).sentinels]
    nodes = data_nodes(url)
    done = transport.run([python, "-c", _CODE, *sentinels, *nodes], timeout=60, check=True)
    found = tagged(done.stdout)
    if found is None:
        raise HostError(f"host {name!r}: could not check that it reaches the broker's "
                        "sentinels (no answer from its python)")
    missing = found.split()
    if set(sentinels) <= set(missing) or any(n in missing for n in nodes):
        raise HostError(
            f"host {name!r} cannot reach {', '.join(missing)} of the Sentinel-managed broker "
            "([broker] sentinels and the data nodes they name); such a broker is never "
            "tunnelled (its master moves on a failover): list sentinels whose addresses, "
            "and whose nodes' addresses, the host reaches")


__all__ = ["VIA", "check_reachable", "data_nodes"]
