"""Turn pydantic and TOML errors about a run file into one clear :class:`ConfigError`.

The message names the key path as the user wrote it (``integrand.a``, ``transforms[0].radius``),
the line when the file text is known, the offending value and what would be valid.
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from mainboard.errors import ConfigError

PATTERN_HINTS = {
    "target": "of the form 'package.module:function'",
    "name": "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
}


def toml_error(exc: tomllib.TOMLDecodeError, file: str) -> ConfigError:
    """A TOML syntax error, with the line tomllib reported."""
    text = str(exc)
    match = re.search(r"\(at line (\d+), column \d+\)", text)
    line = int(match.group(1)) if match else None
    message = re.sub(r"\s*\(at line \d+, column \d+\)", "", text)
    return ConfigError(f"invalid TOML: {message}", file=file, line=line)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through unions, lists, Annotated)."""
    origin = get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if origin in (typing.Union, types.UnionType, typing.Annotated, list):
        out: list[type[BaseModel]] = []
        for arg in get_args(annotation):
            out.extend(_models_in(arg))
        return out
    return []


def _kind_of(model: type[BaseModel]) -> tuple[str, ...]:
    field = model.model_fields.get("kind")
    return get_args(field.annotation) if field is not None else ()


def _walk(root: type[BaseModel], loc: tuple[int | str, ...]
          ) -> tuple[list[str | int], type[BaseModel] | None, list[str]]:
    """Follow ``loc`` through the models: user-visible path, last model, union kinds seen last."""
    path: list[str | int] = []
    model: type[BaseModel] | None = root
    candidates: list[type[BaseModel]] = [root]
    kinds: list[str] = []
    for part in loc:
        if isinstance(part, int):
            path.append(part)
            continue
        tagged = [m for m in candidates if part in _kind_of(m)]
        if tagged:
            model, candidates = tagged[0], tagged
            continue
        model = next((m for m in candidates if part in m.model_fields), None)
        path.append(part)
        if model is None:
            return path, None, kinds
        inner = _models_in(model.model_fields[part].annotation)
        kinds = [k for m in inner for k in _kind_of(m)]
        candidates = inner
        if len(inner) == 1:
            model = inner[0]
    return path, (candidates[0] if len(candidates) == 1 else model), kinds


def _dotted(path: list[str | int]) -> str:
    """``transforms[0].radius`` style, as a user reads the run file."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _section_end(lines: list[str], start: int) -> int:
    for i in range(start, len(lines)):
        if lines[i].lstrip().startswith("["):
            return i
    return len(lines)


def _key_line(lines: list[str], start: int, end: int, key: str) -> int | None:
    pattern = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
    for i in range(start, end):
        if pattern.match(lines[i]):
            return i + 1
    return None


def find_line(text: str, path: list[str | int]) -> int | None:
    """Best-effort line of ``path`` in TOML text: the deepest table header that matches,
    then the key inside that table (the n-th ``[[table]]`` for array entries)."""
    lines = text.splitlines()
    names = [p for p in path if isinstance(p, str)]
    if not names:
        return None
    nth = path[1] if len(path) > 1 and isinstance(path[1], int) else 0
    for depth in range(len(names), 0, -1):
        table = re.escape(".".join(names[:depth]))
        header = re.compile(r"^\s*\[\[?\s*" + table + r"\s*\]\]?\s*(#.*)?$")
        hits = [i for i, line in enumerate(lines) if header.match(line)]
        if not hits:
            continue
        start = hits[min(nth, len(hits) - 1)] if depth == 1 else hits[0]
        if depth == len(names):
            return start + 1
        found = _key_line(lines, start + 1, _section_end(lines, start + 1), names[depth])
        return found if found is not None else start + 1
    return _key_line(lines, 0, _section_end(lines, 0), names[0])


def to_config_error(exc: ValidationError, root: type[BaseModel], *, file: str | None,
                    text: str | None) -> ConfigError:
    """The first pydantic error as a ConfigError (the rest are counted in the message)."""
    errors = exc.errors()
    err = errors[0]
    loc = tuple(err["loc"])
    path, _model, kinds = _walk(root, loc)
    etype, ctx = err["type"], err.get("ctx") or {}
    value: Any = err.get("input")
    valid: str | list[str] | None = None
    message = err["msg"]
    if etype == "extra_forbidden":
        message = f"unknown key {path[-1]!r}"
        parent = _walk(root, loc[:-1])[1]
        valid = sorted(parent.model_fields) if parent is not None else None
        value = None
    elif etype == "missing":
        message = "missing required key"
        value = None
    elif etype == "union_tag_invalid":
        message = f"unknown kind {ctx.get('tag')!r}"
        value = None
        valid = kinds or ctx.get("expected_tags")
        path = path + ["kind"]
    elif etype == "union_tag_not_found":
        message = "missing key 'kind'"
        valid, value = kinds, None
        path = path + ["kind"]
    elif etype == "value_error" and hasattr(ctx.get("error"), "key"):
        inner = ctx["error"]
        if inner.key:
            path = path + [p if not p.isdigit() else int(p) for p in inner.key.split(".")]
        message, value = str(inner), inner.value
        valid = getattr(inner, "valid", None)
    elif etype == "string_pattern_mismatch":
        message = f"must be {PATTERN_HINTS.get(str(path[-1]), 'of the documented form')}"
    elif isinstance(value, dict | list) and len(repr(value)) > 80:
        value = None
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    line = find_line(text, path) if text is not None else None
    return ConfigError(message, file=file, key=_dotted(path) or None, line=line, value=value,
                       valid=valid)
