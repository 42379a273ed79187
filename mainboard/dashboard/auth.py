"""The dashboard's one secret: a random token in the URL it prints (Jupyter's convention).

The first request carries ``?token=...``; the answer sets a signed, HttpOnly, SameSite
cookie, so links and the pages' own polling need no token afterwards. Scripts may send
``Authorization: token ...`` instead. Anything else gets 401 and no run data.
"""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path

from mainboard.errors import UserError

TOKEN_BYTES = 24
TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def new_token() -> str:
    """A fresh URL-safe token (192 bits)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def read_token(path: str | Path) -> str:
    """The token kept in ``path`` (``--token-file``): URL-safe, at least 16 characters."""
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise UserError(f"--token-file {path}: cannot read it ({exc.strerror})") from None
    if len(token) < 16 or not set(token) <= TOKEN_CHARS:
        raise UserError(f"--token-file {path}: not a token; valid: one line of at least 16 "
                        "characters from A-Z a-z 0-9 _ -")
    return token


def cookie_name(port: int) -> str:
    """One cookie per port: two dashboards on one machine do not log each other out."""
    return f"mainboard-dashboard-{port}"


def matches(given: str | None, token: str) -> bool:
    """Constant-time comparison (no timing hint about how much of the token was right)."""
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def from_header(value: str | None) -> str | None:
    """The token of an ``Authorization: token <t>`` (or ``Bearer <t>``) header."""
    if not value:
        return None
    scheme, _, rest = value.partition(" ")
    return rest.strip() if scheme.lower() in ("token", "bearer") else None


__all__ = ["cookie_name", "from_header", "matches", "new_token", "read_token"]
