"""Every Redis client of mainboard comes from here, so a Sentinel-managed broker is one case.

A plain broker is ``redis://`` / ``rediss://``; a Sentinel-managed one is written
``sentinel://[USER:PASSWORD@]HOST:PORT,HOST:PORT,.../DB?master=NAME``: the sentinels to ask,
the master's name, and the data nodes' credentials. ``redis_client`` asks the sentinels for the master on each (re)connect, so a client
made once follows a failover instead of writing to a dead host.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote

from mainboard.names import lazy

if TYPE_CHECKING:
    import redis

SENTINEL_SCHEME = "sentinel://"
SENTINEL_ENTRY_FORM = 'HOST:PORT with PORT 1-65535, e.g. "10.0.0.5:26379" or "[::1]:26379"'
SENTINEL_URL_FORM = "sentinel://[USER:PASSWORD@]HOST:PORT,HOST:PORT/DB?master=NAME"
_ENTRY = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>\d{1,5})")
WAIT_MS = 1000  # a replica that lags longer is not waited for: the re-send covers a loss
SHORT_S = 10.0
_short_until: dict[int, float] = {}  # id(client) -> when to WAIT again
_MASTER = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class SentinelTarget:
    """A Sentinel-managed broker: where to ask, for which master, with which credentials."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    username: str | None = None
    password: str | None = None
    db: int = 0
    min_replicas: int = 0


def is_sentinel(url: str) -> bool:
    """Whether ``url`` names a Sentinel-managed broker rather than one Redis server."""
    return url[:len(SENTINEL_SCHEME)].lower() == SENTINEL_SCHEME


def sentinel_entry_problem(entry: str) -> str | None:
    """What is wrong with one ``[broker] sentinels`` entry; None when it is HOST:PORT."""
    match = _ENTRY.fullmatch(entry.strip())
    if not match:
        return "not HOST:PORT"
    if not 1 <= int(match["port"]) <= 65535:
        return "the port is out of range"
    return None


def master_problem(name: str) -> str | None:
    """What is wrong with a master name (Sentinel's ``monitor NAME``); None when fine."""
    return None if _MASTER.fullmatch(name) else "letters, digits, _ . - only (1-64)"


def sentinel_address(entry: str) -> tuple[str, int]:
    """(host, port) of a checked entry."""
    match = _ENTRY.fullmatch(entry.strip())
    if match is None:
        raise ValueError(f"sentinel {entry!r}: not {SENTINEL_ENTRY_FORM}")
    return (match["v6"] or match["host"]), int(match["port"])


def sentinel_url(target: SentinelTarget) -> str:
    """The one-string form of ``target``, to travel where a broker URL travels."""
    auth = ""
    if target.password is not None:
        auth = f"{quote(target.username or '', safe='')}:{quote(target.password, safe='')}@"
    hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in target.sentinels)
    wait = f"&min_replicas={target.min_replicas}" if target.min_replicas else ""
    return f"{SENTINEL_SCHEME}{auth}{hosts}/{target.db}?master={target.master}{wait}"


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The target a ``sentinel://`` URL names; ValueError in one line when malformed."""
    if not is_sentinel(url):
        raise ValueError(f"not a Sentinel URL: it must look like {SENTINEL_URL_FORM}")
    rest = url[len(SENTINEL_SCHEME):]
    netloc, _, tail = rest.partition("/")
    auth, _, hosts = netloc.rpartition("@")
    username = password = None
    if auth:
        user, _, secret = auth.partition(":")
        username, password = (unquote(user) or None), unquote(secret)
    entries = [e for e in hosts.split(",") if e]
    if not entries:
        raise ValueError(f"no sentinel in the URL: it must look like {SENTINEL_URL_FORM}")
    sentinels = tuple(sentinel_address(e) for e in entries)
    path, _, query = tail.partition("?")
    fields = parse_qs(query)
    master = (fields.get("master") or [""])[0]
    wait = (fields.get("min_replicas") or ["0"])[0]
    if not wait.isdigit():
        raise ValueError(f"min_replicas {wait!r} must be a whole number >= 0")
    if master_problem(master):
        raise ValueError(f"master {master!r}: {master_problem(master)}; "
                         f"write ?master=NAME as in {SENTINEL_URL_FORM}")
    db = path.strip("/") or "0"
    if not db.isdigit():
        raise ValueError(f"database {db!r} must be a number, e.g. /0")
    return SentinelTarget(sentinels, master, username, password, int(db), int(wait))


def redis_client(url: str, **kwargs: Any) -> redis.Redis:
    """A client of the broker at ``url`` (redis://, rediss:// or sentinel://); ``kwargs`` are
    redis-py's (timeouts, retry). A Sentinel client asks for the master on every connect."""
    if not is_sentinel(url):
        return lazy("redis").Redis.from_url(url, **kwargs)  # redis-py loads with a client
    target = parse_sentinel_url(url)
    auth = {"username": target.username, "password": target.password}
    timeouts = {k: kwargs[k] for k in ("socket_timeout", "socket_connect_timeout") if k in kwargs}
    # The sentinels are asked without credentials (Sentinel's own requirepass is not
    # supported yet): an AUTH to a sentinel that has none is refused.
    sentinel = lazy("redis.Sentinel")(list(target.sentinels), sentinel_kwargs=timeouts,
                                      **timeouts)
    return sentinel.master_for(target.master, db=target.db, **auth, **kwargs)


def min_replicas(url: str) -> int:
    """How many replicas a write the coordinator counts on waits for (0: a plain URL)."""
    return parse_sentinel_url(url).min_replicas if is_sentinel(url) else 0


def wait_replicas(client: redis.Redis, replicas: int, timeout_ms: int = WAIT_MS) -> int:
    """After a write the caller counts on: block until ``replicas`` replicas have it (WAIT),
    so a failover right after cannot lose it; the number that acknowledged. 0 asks nothing.

    A master short of replicas (after a failover, until the old master returns as one) would
    make every write wait the whole timeout: once WAIT falls short, this client skips it for
    ``SHORT_S``; what a failover then loses, the coordinator's re-send covers."""
    if replicas <= 0 or time.monotonic() < _short_until.get(id(client), 0.0):
        return 0
    acked = int(client.execute_command("WAIT", replicas, timeout_ms))
    if acked < replicas:
        _short_until[id(client)] = time.monotonic() + SHORT_S
    return acked


def kombu_form(url: str) -> tuple[str, str]:
    """kombu's spelling of a Sentinel URL, ``sentinel://[:PW@]H:P/DB;sentinel://...``, and
    the master name (kombu takes it from ``master_name`` in the transport options)."""
    target = parse_sentinel_url(url)
    auth = ""
    if target.password is not None:
        auth = f"{quote(target.username or '', safe='')}:{quote(target.password, safe='')}@"
    hosts = (f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in target.sentinels)
    return ";".join(f"{SENTINEL_SCHEME}{auth}{h}/{target.db}" for h in hosts), target.master
