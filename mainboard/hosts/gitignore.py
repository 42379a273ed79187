"""Which workspace files a mirror carries: ``.gitignore`` rules (a faithful subset) plus excludes.

Supported, with git's meaning: comments (``#``), blank lines, ``\\`` escapes (``\\#``,
``\\!``, ``\\ `` for a kept trailing space), ``!`` negation (last match wins, deeper
``.gitignore`` files override shallower ones), a trailing ``/`` (directories only), a
``/`` at the start or in the middle anchoring the pattern to its ``.gitignore``'s
directory (otherwise it matches a name at any depth), ``*`` and ``?`` (never across
``/``), ``[...]`` classes (``!``/``^`` negate) and ``**`` as a whole segment
(``**/x``, ``x/**``, ``a/**/b``). As in git, nothing inside an ignored directory can
be re-included. Not supported: POSIX classes such as ``[[:alpha:]]``, global and
``.git/info/exclude`` files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from mainboard.errors import UserError

ALWAYS_EXCLUDED = (".git/", ".mainboard/", ".venv/", "__pycache__/")


@dataclass(frozen=True)
class Pattern:
    """One compiled ignore line; ``source`` is the line as written, for messages."""

    source: str
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    anchored: bool

    def matches(self, path: str, is_dir: bool) -> bool:
        """True when ``path`` (relative to the rule's directory, ``/``-separated) matches."""
        if self.dir_only and not is_dir:
            return False
        subject = path if self.anchored else path.rsplit("/", 1)[-1]
        return self.regex.fullmatch(subject) is not None


def _char_class(body: str, start: int) -> tuple[str, int] | None:
    """The regex for the ``[...]`` opening at ``start`` and the index after it; None if unclosed."""
    j = start + 1
    negate = j < len(body) and body[j] in "!^"
    j += negate
    first = j
    if j < len(body) and body[j] == "]":
        j += 1
    while j < len(body) and body[j] != "]":
        j += 2 if body[j] == "\\" else 1
    if j >= len(body):
        return None
    out, k = [], first
    while k < j:
        char = body[k]
        if char == "\\" and k + 1 < j:
            out.append(re.escape(body[k + 1]))
            k += 2
            continue
        out.append("\\" + char if char in "[]&~|^\\" else char)
        k += 1
    return ("[^/" if negate else "[") + "".join(out) + "]", j + 1


def _segment(segment: str) -> str:
    """Regex for one path segment: ``*`` and ``?`` stay within it, ``\\x`` is a literal x."""
    out, i = [], 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\" and i + 1 < len(segment):
            i += 1
            out.append(re.escape(segment[i]))
        elif char == "[" and (found := _char_class(segment, i)) is not None:
            out.append(found[0])
            i = found[1]
            continue
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def translate(body: str) -> str:
    """Regex (for fullmatch) of a pattern body with no leading or trailing ``/``."""
    segments = body.split("/")
    out = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:.*/)?")
        else:
            out.append(_segment(segment) + ("" if last else "/"))
    return "".join(out)


def _strip_trailing_spaces(line: str) -> str:
    """Drop trailing spaces unless the last one is escaped with a backslash."""
    while line.endswith(" ") and not line.endswith("\\ "):
        line = line[:-1]
    return line


def parse_line(line: str) -> Pattern | None:
    """Compile one ``.gitignore`` line; None for blanks and comments."""
    text = _strip_trailing_spaces(line.rstrip("\r\n"))
    if not text or text.startswith("#"):
        return None
    negate = text.startswith("!")
    body = text[1:] if negate else text
    dir_only = body.endswith("/")
    body = body.rstrip("/")
    anchored = "/" in body
    body = body.lstrip("/")
    if not body:
        return None
    return Pattern(line.rstrip("\r\n"), re.compile(translate(body), re.DOTALL), negate,
                   dir_only, anchored)


def parse(lines: Iterable[str]) -> list[Pattern]:
    """Compile every meaningful line, in order."""
    return [p for p in map(parse_line, lines) if p is not None]


@dataclass(frozen=True)
class RuleSet:
    """The patterns of one ``.gitignore`` (or exclude list), relative to directory ``base``."""

    base: str
    patterns: tuple[Pattern, ...]

    def verdict(self, path: str, is_dir: bool) -> bool | None:
        """True (ignored) or False (re-included) from the last matching pattern; None if none."""
        if self.base:
            if not path.startswith(self.base + "/"):
                return None
            path = path[len(self.base) + 1:]
        for pattern in reversed(self.patterns):
            if pattern.matches(path, is_dir):
                return not pattern.negate
        return None


def gitignored(path: str, is_dir: bool, rulesets: Sequence[RuleSet]) -> bool:
    """git's answer for one path: the deepest ``.gitignore`` with a matching line decides."""
    for rules in reversed(rulesets):
        verdict = rules.verdict(path, is_dir)
        if verdict is not None:
            return verdict
    return False


class Selection:
    """What a mirror carries: not always-excluded, not in ``exclude``, not git-ignored."""

    def __init__(self, exclude: Sequence[str] = (), skip: Sequence[str] = ()) -> None:
        self.always = RuleSet("", tuple(parse(ALWAYS_EXCLUDED)))
        self.exclude = RuleSet("", tuple(parse(exclude)))
        self.skip = {s.strip("/") for s in skip}

    def excluded(self, path: str, is_dir: bool, rulesets: Sequence[RuleSet]) -> bool:
        """True when ``path`` stays behind (it and, for a directory, all it holds)."""
        return (path in self.skip or self.always.verdict(path, is_dir) is True
                or self.exclude.verdict(path, is_dir) is True
                or gitignored(path, is_dir, rulesets))

    def walk(self, root: Path) -> Iterator[tuple[str, os.stat_result]]:
        """Every carried regular file and symlink under ``root``: (relative path, lstat)."""
        pending: list[tuple[str, tuple[RuleSet, ...]]] = [("", ())]
        while pending:
            directory, rulesets = pending.pop()
            here = root / directory if directory else root
            rulesets = (*rulesets, *_load_rules(here / ".gitignore", directory))
            try:
                entries = sorted(os.scandir(here), key=lambda e: e.name)
            except OSError as exc:
                raise UserError(f"cannot list workspace directory {here}: {exc.strerror}; "
                                "fix its permissions or add it to [workspace] exclude") from exc
            subdirs = []
            for entry in entries:
                path = f"{directory}/{entry.name}" if directory else entry.name
                is_dir = entry.is_dir(follow_symlinks=False)
                if self.excluded(path, is_dir, rulesets):
                    continue
                if is_dir:
                    subdirs.append(path)
                elif entry.is_file(follow_symlinks=False) or entry.is_symlink():
                    yield path, entry.stat(follow_symlinks=False)
            pending.extend((sub, rulesets) for sub in reversed(subdirs))


def _load_rules(path: Path, base: str) -> tuple[RuleSet, ...]:
    """The rules of one ``.gitignore`` file, or nothing when there is none."""
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return ()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from exc
    patterns = tuple(parse(text.split("\n")))
    return (RuleSet(base, patterns),) if patterns else ()
