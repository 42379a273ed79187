"""What a broker URL must look like: one check for mainboard.toml, the environment and callers.

redis-py and kombu parse a broker URL only when they first connect, so a typo (``redis:/``,
a port that is not a number, an unbalanced ``[``) used to surface as a ValueError or a
connection error deep inside them, after workers had started. Checked here, it is one line
naming the problem; callers show the URL through ``mainboard.redact.redact_url``.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from mainboard.redact import url_secrets
from mainboard.redisclient import SENTINEL_URL_FORM, is_sentinel, parse_sentinel_url

# The environment variable that hands a broker URL (password included) to a process:
# workers, Flower and the CLI read it; bridges set it from a 0600 file, never in argv.
BROKER_URL_ENV = "MAINBOARD_BROKER_URL"
REDIS_URL_FORMS = ("redis://[:PASSWORD@]HOST:PORT/DB or rediss://... (TLS) or "
                   f"{SENTINEL_URL_FORM}")
_SCHEME = re.compile(r"rediss?://", re.I)
_DB = re.compile(r"/*\d*/*")
# What cuts a password short when left raw: the parser takes it for the path, query or fragment.
_UNSAFE_IN_SECRET = re.compile(r"[/?#\s]")


def redis_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a Redis broker URL, in a few words; None when nothing.

    The words never quote the URL's parts: a password cut short by a stray ``#`` would
    otherwise show up as the "port".
    """
    if is_sentinel(url):
        try:
            parse_sentinel_url(url)
        except ValueError as exc:
            return str(exc)
        return None
    if not _SCHEME.match(url):
        return "not a Redis URL: it must start with redis://, rediss:// or sentinel://"
    if any(_UNSAFE_IN_SECRET.search(secret) for secret in url_secrets(url, decoded=False)):
        return "the password holds / ? # or a space: percent-encode them (%2F %3F %23 %20)"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        if "IPv6" in str(exc):
            return "unbalanced [ or ] around the host (an IPv6 host is written [::1])"
        if "range" in str(exc):
            return "the port is out of range: valid 1-65535"
        return "the port is not a number"
    if port == 0:
        return "the port is out of range: valid 1-65535"
    if not _DB.fullmatch(parts.path):
        return "the database after the host must be a number, e.g. /0"
    return None
