"""The dashboard's one secret: a random token in the URL it prints (Jupyter's convention).

The first request carries ``?token=...``; the answer sets a signed, HttpOnly, SameSite
cookie, so links and the pages' own polling need no token afterwards. Scripts may send
``Authorization: token ...`` instead. Anything else gets 401 and no run data.
"""

from __future__ import annotations

import hmac
import secrets

TOKEN_BYTES = 24


def new_token() -> str:
    """A fresh URL-safe token (192 bits)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


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


__all__ = ["cookie_name", "from_header", "matches", "new_token"]
