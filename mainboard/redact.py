"""Keep credentials out of anything printed or logged.

Redaction works by pattern, not by parsing: a mistyped broker URL (``redis:/:PW@h``,
``redis//:PW@h``, a port that is not a number, an unbalanced ``[``) is exactly what a URL
parser refuses, and it must still be shown (so its owner sees the typo) without its
password. What counts as a secret: whatever stands between ``scheme://`` (or a mistyped
``scheme:/``, ``scheme//``, or a bare ``:``) and the last ``@`` before the host, the user
name before its ``:`` kept; and the value of ``password=``, ``pass=``, ``pwd=``, ``token=``
(also ``X_PASSWORD=``, ``'password': '...'``). Everything else is left as it is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import unquote

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|CREDENTIAL|PRIVATE", re.I)
_ENV_CALL = re.compile(r"""env\(\s*['"]([^'"]*)['"]""")
MASK = "***"
# Exact secrets of this process's workspace (its broker password, its providers' API keys),
# scrubbed by every redact_text call: a bare API key has no pattern to be found by.
_KNOWN: set[str] = set()

# Where a URL in running text ends: whitespace, quotes, angle brackets, backticks.
_STOP = "\\s'\"<>`"
# A scheme as typed, right or wrong: redis://, redis:/, redis:, redis//, redis/.
_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*(?::/{0,2}|/{1,2})"
# [scheme][user]:SECRET@host. The secret runs to the LAST @ before the host (a raw @ or :
# in a password is common); a URL in text starts at a word boundary (never mid-token), and
# a host never starts with ] or ) (so the help text ``redis://[:PASSWORD@]HOST`` stays).
# Without a scheme the secret may not start with "/": ``redis://user@h`` has no password.
_USERINFO_IN_TEXT = re.compile(
    rf"(?<![^{_STOP}=(\[,;])(?P<lead>{_SCHEME}[^{_STOP}:/?#@\[]*:|[^{_STOP}:/?#@\[]*:(?!/))"
    rf"(?P<secret>[^{_STOP}]*)@(?=[^{_STOP}@\])])")
# The same for one URL on its own, whose password may even hold spaces or quotes.
_USERINFO_WHOLE = re.compile(
    rf"\A(?P<lead>{_SCHEME}[^:/?#@]*:|[^:/?#@]*:(?!/))(?P<secret>.*)@(?=[^@]*\Z)", re.S)
_KEY = r"(?:[A-Za-z0-9]*_)?(?:password|passwd|pass|pwd|token|secret)"
# name=value (query strings, keyword reprs, environment dumps), quoted or not.
_ASSIGNED = re.compile(
    rf"""(?P<lead>\b{_KEY}\s*=\s*)(?:'(?P<q1>[^']*)'|"(?P<q2>[^"]*)"|(?P<bare>[^&\s'",;)#]+))""",
    re.I)
# 'password': 'value' (dict reprs, JSON).
_KEYED = re.compile(rf"""(?P<lead>(?P<q>['"]){_KEY}(?P=q)\s*:\s*)(?:'(?P<q1>[^']*)'|"(?P<q2>[^"]*)")""",
                    re.I)


def looks_secret(name: str) -> bool:
    """True for names such as HF_TOKEN or DB_PASSWORD whose values must not be shown."""
    return bool(SECRET_NAME.search(name))


def reads_secret(template: str) -> bool:
    """True when a ``{{ env('X') }}`` template reads a variable with a secret-looking name."""
    return any(looks_secret(name) for name in _ENV_CALL.findall(template))


def _mask_userinfo(match: re.Match[str]) -> str:
    return f"{match['lead']}{MASK}@" if match["secret"] else match[0]


def _mask_value(match: re.Match[str]) -> str:
    if match["q1"] is not None:
        return f"{match['lead']}'{MASK}'"
    if match["q2"] is not None:
        return f'{match["lead"]}"{MASK}"'
    return f"{match['lead']}{MASK}"


def _redact(text: str, userinfo: re.Pattern[str], also: Iterable[str]) -> str:
    for secret in sorted({s for s in also if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = userinfo.sub(_mask_userinfo, text)
    text = _ASSIGNED.sub(_mask_value, text)
    return _KEYED.sub(_mask_value, text)


def redact_text(text: str, also: Iterable[str] = ()) -> str:
    """``text`` with every URL password and ``password=``-style value shown as ``***``.

    For messages, tracebacks and log lines that may quote a URL, valid or not. ``also``
    names exact secrets (e.g. a password read from a file) to scrub wherever they appear,
    besides those :func:`remember_secrets` was given.
    """
    return _redact(text, _USERINFO_IN_TEXT, (*_KNOWN, *also))


def remember_secrets(secrets: Iterable[str]) -> None:
    """Scrub these exact values from everything :func:`redact_text` sees in this process
    from now on (a workspace's broker password, its providers' API keys). Values shorter
    than 6 characters are left to the patterns: masking them everywhere would mangle
    ordinary text."""
    _KNOWN.update(s for s in secrets if len(s) >= 6)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, the rest (scheme, host, port, db) as typed."""
    return _redact(url, _USERINFO_WHOLE, ())


def url_secrets(url: str, decoded: bool = True) -> list[str]:
    """The password of ``url`` and its secret query values, as written (and percent-decoded).

    For scrubbing a process's log, where a secret may appear without its URL around it.
    """
    found = [m["secret"] for m in (_USERINFO_WHOLE.match(url),) if m and m["secret"]]
    for match in _ASSIGNED.finditer(url):
        found.append(match["q1"] or match["q2"] or match["bare"] or "")
    forms = {s for f in found for s in ((f, unquote(f)) if decoded else (f,)) if s}
    return sorted(forms, key=len, reverse=True)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message and traceback with :func:`redact_text`, never drops one.

    It belongs on handlers, not loggers: a logger's own filters never see the records
    that propagate up from its children (``celery.worker``, ``mainboard.tasks...``).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


def install_log_redaction(*loggers: logging.Logger | None) -> None:
    """Put a :class:`RedactingFilter` on every handler of ``loggers`` (default: the root
    logger) and on logging's last-resort handler, once each.

    Call it after the handlers exist (after ``basicConfig``, or from Celery's
    ``after_setup_logger``): handlers added later are not covered.
    """
    handlers = [h for lg in (loggers or (None,)) for h in (lg or logging.getLogger()).handlers]
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
