"""The run file's value types, strict, and their description in words for error messages.

A run file is typed by hand, so a lax coercion would hide a mistake: ``true`` is not 1, "3"
is not 3 and 2.0 is not a count. Integers are exact ints (numpy integers from Python callers
too) and carry a range that fits int64, the width the engine counts samples and seeds in;
numbers are finite (a TOML integer is still a number). :func:`describe` says what a field
takes, from the same annotations, so the "valid:" of an error never drifts from the check.
"""

from __future__ import annotations

import operator
import types
import typing
from typing import Annotated, Any, Literal, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel, BeforeValidator, Field, Strict
from pydantic.fields import FieldInfo

INT64_MAX = 2**63 - 1


def _exact_int(value: Any) -> Any:
    """numpy (or other exact) integers as int; bool, str and float pass on to be refused."""
    if isinstance(value, int):  # bool too: the strict check refuses it
        return value
    try:
        return operator.index(value)
    except TypeError:
        return value


# Int states no range: every field of this type gives its own, within int64.
Int = Annotated[int, BeforeValidator(_exact_int), Strict()]
Count = Annotated[Int, Field(ge=1, le=INT64_MAX)]
NonNegativeInt = Annotated[Int, Field(ge=0, le=INT64_MAX)]
Real = Annotated[float, Strict(), Field(allow_inf_nan=False)]
PositiveReal = Annotated[Real, Field(gt=0)]
Flag = Annotated[bool, Strict()]
Text = Annotated[str, Strict()]

PATTERN_HINTS = {
    "target": "of the form 'package.module:function'",
    "name": "of 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
    "of": "of the form 'x<i>' (a coordinate of the point), 'd<j>' (a discrete coordinate) "
          "or 'package.module:function' (a function of the point)",
}
_NOUNS = {int: ("an integer", "integers"), float: ("a finite number", "finite numbers"),
          str: ("a quoted string", "quoted strings"), bool: ("true or false", "true or false")}
_BOUNDS = ((at.Gt, "gt", "greater than"), (at.Ge, "ge", "greater than or equal to"),
           (at.Lt, "lt", "less than"), (at.Le, "le", "less than or equal to"))


def number(value: Any) -> str:
    """A bound as the user reads it; int64's limit is named, not just spelled out."""
    if value == INT64_MAX:
        return f"{INT64_MAX} (2**63-1)"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _flatten(metadata: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in metadata:
        out.extend(_flatten(item.metadata) if isinstance(item, FieldInfo) else [item])
    return out


def _bounds(metadata: list[Any]) -> str:
    """``from 1 to 1000`` or ``greater than 0 and less than 1``; the last bound of a kind wins
    (the field's own Field(...) comes after the alias's, as pydantic applies them)."""
    found: dict[str, Any] = {}
    for item in metadata:
        for cls, attr, _words in _BOUNDS:
            if isinstance(item, cls):
                found[attr] = getattr(item, attr)
    if "ge" in found and "le" in found:
        return f"from {number(found['ge'])} to {number(found['le'])}"
    return " and ".join(f"{words} {number(found[attr])}" for _cls, attr, words in _BOUNDS
                        if attr in found)


def describe(annotation: Any, metadata: list[Any] | None = None, *, plural: bool = False,
             name: str = "") -> str:
    """What a value of ``annotation`` may be, in words: ``an integer from 1 to 1000``."""
    meta = list(metadata or [])
    while get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        meta = [*extra, *meta]
    meta = _flatten(meta)
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return ", or ".join(describe(m, plural=plural, name=name) for m in members)
    if origin is Literal:
        return " or ".join(repr(a) for a in get_args(annotation))
    if origin is list:
        text = "an array of " + describe(get_args(annotation)[0], plural=True, name=name)
        least = [m.min_length for m in meta if isinstance(m, at.MinLen)]
        return text + (f" (at least {least[-1]})" if least and least[-1] > 1 else "")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        kinds = get_args(annotation.model_fields["kind"].annotation) \
            if "kind" in annotation.model_fields else ()
        keys = ", ".join(n for n in annotation.model_fields if n != "kind")
        return (f"a table with kind = {' or '.join(map(repr, kinds))}" if kinds
                else f"a table with keys {keys}")
    if origin is dict:
        return "tables" if plural else "a table"
    noun = _NOUNS.get(annotation)
    if noun is None:
        return "any value"
    text = noun[plural]
    if annotation is str and name in PATTERN_HINTS:
        return f"{text} {PATTERN_HINTS[name]}"
    bounds = _bounds(meta)
    return f"{text} {bounds}" if bounds else text


def describe_field(field: FieldInfo, name: str = "", *, item: bool = False) -> str:
    """What a model field takes (``item``: what one entry of its array or table takes)."""
    if item:  # such a field has an array or table member (no run-file field is a tuple)
        member = next(m for m in _members(field.annotation) if get_origin(m) in (list, dict))
        return describe(get_args(member)[-1], name=name)
    return describe(field.annotation, field.metadata, name=name)


def _members(annotation: Any) -> list[Any]:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for a in get_args(annotation) for m in _members(a)]
    return [annotation]
