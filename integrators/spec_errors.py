"""Turn pydantic and TOML errors about a run file into one clear :class:`ConfigError`.

The message names the key path as the user wrote it (``integrand.a``, ``transforms[0].radius``),
the line when the file text is known, the offending value and what would be valid.
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from mainboard.errors import ConfigError
from mainboard.integrators.spec_types import INT64_MAX, describe_field, number


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


@dataclass
class _Place:
    """Where a pydantic error location points in the run file's models."""

    path: list[str | int]                  # as the user reads it: transforms, 0, radius
    model: type[BaseModel] | None          # the last model reached (None: an unknown key)
    kinds: list[str]                       # the kinds a tagged union there accepts
    field: FieldInfo | None = None         # the last field reached, and its name
    name: str = ""
    item: bool = False                     # inside that field's array or table

    @property
    def key(self) -> tuple[str | int, ...]:
        """The path up to the field (array indices inside it left out)."""
        cut = len(self.path)
        while self.item and cut and isinstance(self.path[cut - 1], int):
            cut -= 1
        return tuple(self.path[:cut])


def _walk(root: type[BaseModel], loc: tuple[int | str, ...]) -> _Place:
    """Follow ``loc`` through the models; past a plain field, the strings pydantic adds for
    union members (``constrained-float``, ``list[float]``) are not keys and are dropped."""
    place = _Place([], root, [])
    candidates: list[type[BaseModel]] = [root]
    leaf, table = False, False
    for part in loc:
        if isinstance(part, int) or table:
            place.path.append(part)
            place.item = place.item or leaf
            continue
        if leaf:
            continue
        tagged = [m for m in candidates if part in _kind_of(m)]
        if tagged:
            place.model, candidates = tagged[0], tagged
            continue
        owner = next((m for m in candidates if part in m.model_fields), None)
        place.path.append(part)
        if owner is None:
            place.model = None
            return place
        place.field, place.name, place.item = owner.model_fields[part], part, False
        inner = _models_in(place.field.annotation)
        place.kinds = [k for m in inner for k in _kind_of(m)]
        candidates, leaf = inner, not inner
        table = leaf and get_origin(place.field.annotation) is dict
        if len(inner) == 1:
            place.model = inner[0]
    return place


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
    found = _key_line(lines, 0, _section_end(lines, 0), names[0])
    # A top-level key the file lacks belongs before the first table: point at the top.
    return found if found is not None or len(names) > 1 else 1


_WRONG_TYPE = {"int": "an integer", "float": "a number", "bool": "true or false",
               "string": "a quoted string", "list": "an array", "dict": "a table",
               "model": "a table"}
_BOUND_WORDS = {"greater_than": ("gt", "greater than"),
                "greater_than_equal": ("ge", "greater than or equal to"),
                "less_than": ("lt", "less than"), "less_than_equal": ("le", "less than or equal to")}


def _wrong_type(etype: str) -> str | None:
    """The expected type a pydantic type error names (None: not a type error)."""
    base, _, rest = etype.partition("_")
    if rest in ("type", "parsing", "from_float", "attributes_type") or etype == "literal_error":
        return _WRONG_TYPE.get(base, "")
    return None


def _primary(errors: list[Any], root: type[BaseModel]) -> tuple[Any, _Place, bool, int]:
    """The error to report, where it is, whether every union member refused the value's type,
    and how many other keys have problems. Errors of one union field come together: the member
    that took the value's type says what is wrong (``sigma[1]`` is nan, not "not a number")."""
    placed = [(err, _walk(root, tuple(err["loc"]))) for err in errors]
    first = placed[0][1]
    group = [(e, p) for e, p in placed if p.key[:len(first.key)] == first.key and p.name]
    if not group or first.name == "":
        group = placed[:1]
    chosen = next(((e, p) for e, p in group if _wrong_type(e["type"]) is None), None)
    all_type = chosen is None and len(group) > 1
    err, place = chosen or group[0]
    others = {p.key for e, p in placed} - {place.key}
    return err, place, all_type, len(others)


def _valid(place: _Place) -> str | None:
    """What the field at ``place`` takes, in words (None when unknown)."""
    if place.field is None:
        return None
    return describe_field(place.field, place.name, item=place.item)


def to_config_error(exc: ValidationError, root: type[BaseModel], *, file: str | None,
                    text: str | None) -> ConfigError:
    """The first problem as a ConfigError: key, line, value and valid form (others counted)."""
    err, place, all_type, more = _primary(exc.errors(), root)
    loc, path = tuple(err["loc"]), list(place.path)
    etype, ctx = err["type"], err.get("ctx") or {}
    value: Any = err.get("input")
    valid: str | list[str] | None = _valid(place)
    message = err["msg"].replace("Input should be", "must be")
    expected = _wrong_type(etype)
    if etype == "extra_forbidden":
        message = f"unknown key {path[-1]!r}"
        parent = _walk(root, loc[:-1]).model
        valid = sorted(parent.model_fields) if parent is not None else None
        value = None
    elif etype == "missing":
        message = "missing required key"
        missing = [str(p.path[-1]) for e, p in (
            (e, _walk(root, tuple(e["loc"]))) for e in exc.errors())
            if e["type"] == "missing" and p.path[:-1] == path[:-1] and p.path != path]
        if missing:
            message += f" (also missing: {', '.join(missing)})"
            more -= len(missing)
        value = None
    elif etype == "union_tag_invalid":
        message = f"unknown kind {ctx.get('tag')!r}"
        value = None
        valid = place.kinds or ctx.get("expected_tags")
        path = path + ["kind"]
    elif etype == "union_tag_not_found":
        message = "missing key 'kind'"
        valid, value = place.kinds, None
        path = path + ["kind"]
    elif etype == "value_error" and hasattr(ctx.get("error"), "key"):
        inner = ctx["error"]
        if inner.key:
            path = path + [p if not p.isdigit() else int(p) for p in inner.key.split(".")]
        message, value = str(inner), inner.value
        valid = getattr(inner, "valid", None)
    elif all_type:
        message = "wrong type"
    elif expected is not None and etype != "literal_error":
        message = f"wrong type: expected {expected}" if expected else "wrong type"
    elif etype == "finite_number":
        message = "must be a finite number, not nan or inf"
    elif etype == "less_than_equal" and ctx.get("le") == INT64_MAX:
        message = "too large: counts and seeds are 64-bit integers"
    elif etype in _BOUND_WORDS:
        attr, words = _BOUND_WORDS[etype]
        message = f"must be {words} {number(ctx[attr])}"
    elif etype == "too_short":
        least = ctx.get("min_length", 1)
        message = f"needs at least {least} entr{'y' if least == 1 else 'ies'}"
    elif etype == "string_pattern_mismatch":
        message = "not of the required form"
    if isinstance(value, dict | list) and len(repr(value)) > 80:
        value = None
    if more > 0:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    line = find_line(text, path) if text is not None else None
    return ConfigError(message, file=file, key=_dotted(path) or None, line=line, value=value,
                       valid=valid)
