"""Keep credentials out of anything printed or logged."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|CREDENTIAL|PRIVATE", re.I)
_ENV_CALL = re.compile(r"""env\(\s*['"]([^'"]*)['"]""")


def looks_secret(name: str) -> bool:
    """True for names such as HF_TOKEN or DB_PASSWORD whose values must not be shown."""
    return bool(SECRET_NAME.search(name))


def reads_secret(template: str) -> bool:
    """True when a ``{{ env('X') }}`` template reads a variable with a secret-looking name."""
    return any(looks_secret(name) for name in _ENV_CALL.findall(template))


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
