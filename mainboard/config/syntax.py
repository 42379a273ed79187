"""TOML syntax errors as one ConfigError line: file, line, the key on that line, and the fix.

``tomllib`` says what it expected and where (``at line 3, column 8``, or ``at end of
document`` for an unclosed value), but not which key, nor how to repair it. The source
map supplies the key written on that line; the table below turns tomllib's message
into the concrete fix a user types. Any TOML file mainboard reads can use it.
"""

from __future__ import annotations

import json
import re
import tomllib

from mainboard.config.sourcemap import KeyPath, SourceMap
from mainboard.errors import ConfigError

GENERIC_FIX = "TOML 1.0 (https://toml.io): key = value, strings in quotes, [table] headers"
_QUOTES = ('strings in "double quotes" (a backslash written as \\\\) or \'single quotes\' '
           '(taken literally), closed on the same line; """triple quotes""" span lines')
# tomllib's message (its start) -> what to write instead
FIXES: tuple[tuple[str, str], ...] = (
    ("Invalid value", 'a value after "=": a "quoted string", a number, true or false, '
                      '[an, array] or { an = "inline table" }'),
    ("Expected ']' at the end of a table", "close the header: [table.name] or [[array.name]]"),
    ("Cannot overwrite a value", "each key at most once per table: remove or merge the repeat"),
    ("Cannot declare", "each [table] header at most once per file: merge the two tables"),
    ("Unterminated string", _QUOTES),
    ("Expected \"'\"", _QUOTES),
    ("Unescaped '\\'", _QUOTES),
    ("Found invalid character in string", _QUOTES),
    ("Illegal character", _QUOTES),  # e.g. a line break inside a "string"
    ("Invalid hex value", _QUOTES),  # "C:\Users": \U starts a unicode escape
    ("Unclosed array", "close the array with ]"),
    ("Unclosed inline table", "close the inline table with } on the same line"),
    ("Expected '=' after a key", 'key = value; a key with spaces or dots must be "quoted"'),
    ("Expected newline or end of document", 'one key = value per line; put text and dates '
                                            'in "quotes"'),
    ("Invalid statement", "each line is key = value, a [table] header or a # comment"),
    ("Invalid initial character for a key", 'a key of letters, digits, - and _, or a "quoted '
                                            'key"; no trailing comma in { inline tables }'),
)
_UNCLOSED = ("Unclosed array", "Unclosed inline table", "Unterminated string", "Expected \"'\"")
_BARE = re.compile(r"[A-Za-z0-9_-]+")
_WHERE = re.compile(r"\s*\((?:at line (\d+), column (\d+)|at end of document)\)$")


def syntax_fix(message: str) -> str:
    """The concrete repair for one tomllib message, then the general TOML rule."""
    for prefix, fix in FIXES:
        if message.startswith(prefix):
            return f"{fix} (TOML 1.0, https://toml.io)"
    return GENERIC_FIX


def _last_line(text: str) -> int | None:
    """The number of the last non-blank line: where an unclosed value ran out."""
    return len(text.rstrip().splitlines()) or None  # None: nothing but blanks


def toml_syntax_error(exc: tomllib.TOMLDecodeError, text: str, file: str,
                      sources: SourceMap | None = None) -> ConfigError:
    """One ConfigError for a tomllib failure: ``FILE:LINE: KEY: TOML syntax error: ...; valid: FIX``."""
    raw = str(exc)
    where = _WHERE.search(raw)
    message = raw[:where.start()] if where else raw
    line: int | None = None
    column = ""
    if where and where.group(1):
        line, column = int(where.group(1)), f" at column {where.group(2)}"
    sources = sources or SourceMap(text)
    if where and not where.group(1):
        line, column = _last_line(text), " at the end of the file"
    opener = sources.unclosed if where and not where.group(1) else (
        sources.opened_by(line) if line else None)
    start = sources.exact(opener) if opener else None
    key: KeyPath = ()
    if opener and start is not None and message.startswith(_UNCLOSED):
        key, line, column = opener, start, " (opened here, never closed)"
    elif line:
        key = sources.key_at(line) or opener or sources.table_at(line)
    shown = display_key(key) or None
    return ConfigError(f"TOML syntax error: {message}{column}", file=file, key=shown, line=line,
                       valid=syntax_fix(message))


def display_key(path: KeyPath) -> str:
    """A key path as the user would write it: bare keys as-is, others quoted, indexes as N."""
    return ".".join(str(p) if isinstance(p, int) or _BARE.fullmatch(p) else json.dumps(p)
                    for p in path)
