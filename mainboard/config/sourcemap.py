"""Best-effort map from TOML key paths to line numbers, so value errors can say ``file:LINE``.

``tomllib`` returns plain dicts without positions. This scanner walks the text once,
tracking table headers (``[a.b]``, ``[[x]]``), ``key = value`` lines (dotted and quoted
keys too) and skipping over multi-line strings and arrays. A lookup falls back to the
longest known prefix, so a key inside an inline table reports the line of that table.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

KeyPath = tuple[str | int, ...]
_BARE = re.compile(r"[A-Za-z0-9_-]+")


@dataclass
class _State:
    """Scanner state carried across lines: inside a multi-line string, or array depth."""

    multiline: str | None = None
    depth: int = 0
    array: KeyPath | None = None  # key of the top-level array being scanned
    index: int = 0  # index of the next element of that array
    pending: bool = False  # an element may start at the next non-blank character
    is_array: bool = False  # the outermost open bracket is an array, not an inline table


class SourceMap:
    """Line numbers (1-based) of table headers and keys in one TOML document."""

    def __init__(self, text: str) -> None:
        self._lines: dict[KeyPath, int] = {}
        self._array_counts: dict[KeyPath, int] = {}
        self._headers: dict[KeyPath, int] = {}
        self._inside: dict[int, KeyPath] = {}  # continuation line -> key whose value it holds
        self.unclosed: KeyPath | None = None  # key whose array/string is still open at the end
        self._scan(text)

    def line(self, path: KeyPath) -> int | None:
        """Line of ``path`` or of its longest known prefix; None when nothing matches."""
        for n in range(len(path), 0, -1):
            found = self._lines.get(tuple(path[:n]))
            if found is not None:
                return found
        return None

    def exact(self, path: KeyPath) -> int | None:
        """Line of exactly ``path``, without prefix fallback."""
        return self._lines.get(tuple(path))

    def key_at(self, lineno: int) -> KeyPath:
        """The deepest key or header written on line ``lineno`` (() when none is)."""
        found = [path for path, line in self._lines.items() if line == lineno]
        return max(found, key=len, default=())

    def opened_by(self, lineno: int) -> KeyPath | None:
        """The key whose multi-line array, inline table or string line ``lineno`` continues."""
        return self._inside.get(lineno)

    def table_at(self, lineno: int) -> KeyPath:
        """The table whose header is the last one at or before ``lineno`` (() for the root)."""
        best: tuple[int, KeyPath] = (0, ())
        for path, line in self._headers.items():
            if best[0] < line <= lineno:
                best = (line, path)
        return best[1]

    def _record(self, path: KeyPath, lineno: int) -> None:
        for n in range(1, len(path)):
            self._lines.setdefault(path[:n], lineno)
        self._lines[path] = lineno

    def _scan(self, text: str) -> None:
        table: KeyPath = ()
        state = _State()
        for lineno, line in enumerate(text.splitlines(), start=1):
            pos = 0
            if (state.multiline or state.depth > 0) and state.array:
                self._inside[lineno] = state.array
            if state.multiline:
                end = line.find(state.multiline)
                if end < 0:
                    continue
                pos = end + 3
                state.multiline = None
                self._scan_value(line, pos, state, lineno)
                continue
            if state.depth > 0:
                self._scan_value(line, 0, state, lineno)
                continue
            stripped = line.lstrip()
            pos = len(line) - len(stripped)
            if not stripped or stripped.startswith("#"):
                continue
            try:
                if stripped.startswith("["):
                    table = self._header(line, pos, lineno)
                    continue
                keys, pos = _parse_key(line, pos)
            except ValueError:
                continue  # not something we understand; tomllib reports real syntax errors
            rest = line[pos:].lstrip()
            if not rest.startswith("="):
                continue
            self._record(table + tuple(keys), lineno)
            state.array = table + tuple(keys)
            self._scan_value(line, len(line) - len(rest) + 1, state, lineno)
        if state.depth > 0 or state.multiline:
            self.unclosed = state.array

    def _header(self, line: str, pos: int, lineno: int) -> KeyPath:
        """Parse ``[a.b]`` or ``[[a.b]]`` starting at ``pos``; returns the new table path."""
        is_array = line.startswith("[[", pos)
        keys, end = _parse_key(line, pos + (2 if is_array else 1))
        path: KeyPath = tuple(keys)
        if is_array:
            index = self._array_counts.get(path, -1) + 1
            self._array_counts[path] = index
            path = path + (index,)
        self._record(path, lineno)
        self._headers[path] = lineno
        return path

    def _scan_value(self, line: str, pos: int, state: _State, lineno: int) -> None:
        """Advance over a value, noting an unclosed multi-line string or array for later lines.

        Elements of a top-level array are recorded as ``key + (index,)``.
        """
        while pos < len(line):
            char = line[pos]
            if char == "#":
                return
            if state.depth == 1 and state.is_array and state.pending and char not in " \t,]" \
                    and state.array:
                self._record(state.array + (state.index,), lineno)
                state.pending = False
            if line.startswith('"""', pos) or line.startswith("'''", pos):
                delim = line[pos:pos + 3]
                end = line.find(delim, pos + 3)
                if end < 0:
                    state.multiline = delim
                    return
                pos = end + 3
                continue
            if char == '"':
                pos += 1
                while pos < len(line) and line[pos] != '"':
                    pos += 2 if line[pos] == "\\" else 1
            elif char == "'":
                end = line.find("'", pos + 1)
                pos = len(line) if end < 0 else end
            elif char in "[{":
                state.depth += 1
                if state.depth == 1:
                    state.is_array, state.index, state.pending = char == "[", 0, True
            elif char in "]}":
                state.depth = max(0, state.depth - 1)
            elif char == "," and state.depth == 1 and state.is_array:
                state.index, state.pending = state.index + 1, True
            pos += 1


def _parse_key(line: str, pos: int) -> tuple[list[str], int]:
    """Parse a (possibly dotted, possibly quoted) key starting at ``pos``."""
    keys: list[str] = []
    while True:
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if pos >= len(line):
            raise ValueError("key expected")
        char = line[pos]
        if char == '"':
            end = pos + 1
            while end < len(line) and line[end] != '"':
                end += 2 if line[end] == "\\" else 1
            raw = line[pos:end + 1]
            try:
                keys.append(json.loads(raw))
            except ValueError:
                keys.append(raw[1:-1])
            pos = end + 1
        elif char == "'":
            end = line.find("'", pos + 1)
            if end < 0:
                raise ValueError("unterminated key")
            keys.append(line[pos + 1:end])
            pos = end + 1
        else:
            match = _BARE.match(line, pos)
            if not match:
                raise ValueError("key expected")
            keys.append(match.group())
            pos = match.end()
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if pos < len(line) and line[pos] == ".":
            pos += 1
            continue
        return keys, pos

