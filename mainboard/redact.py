"""Keep credentials out of anything printed or logged."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, safe to print or log."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparseable url, not shown>"
    if password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
