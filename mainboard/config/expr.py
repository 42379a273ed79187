"""A tiny safe arithmetic evaluator for job-default expressions such as ``min(100, attempt * 50)``.

Config values may be formulas over the retry attempt, the requested walltime and the
host's CPU count. Python's ``eval`` would run anything, so expressions are parsed with
``ast`` and walked over a whitelist: numbers, the names in ``ALLOWED_NAMES``, the
functions in ``FUNCTIONS`` and arithmetic. Everything else is refused when the config
loads (``check``), not when a job is submitted.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Collection, Mapping
from typing import Any

from mainboard.errors import ExpressionError

ALLOWED_NAMES: tuple[str, ...] = ("attempt", "walltime_s", "num_cpus")
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min, "max": max, "ceil": math.ceil, "floor": math.floor,
}
_ARITY: dict[str, tuple[int, int | None]] = {
    "min": (2, None), "max": (2, None), "ceil": (1, 1), "floor": (1, 1),
}
_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg, ast.UAdd: operator.pos,
}
_OPERATORS = "+ - * / // % ** and parentheses"
MAX_LENGTH = 500
_MAX_EXPONENT = 64  # keeps `9 ** 9 ** 9` from hanging the loader


def describe_allowed(allowed_names: Collection[str] = ALLOWED_NAMES) -> str:
    """The 'valid' hint every expression error carries."""
    names = ", ".join(allowed_names) or "(none)"
    funcs = ", ".join(f"{f}()" for f in FUNCTIONS)
    return f"names {names}; functions {funcs}; numbers and {_OPERATORS}"


def _fail(message: str, expr: str, allowed_names: Collection[str]) -> ExpressionError:
    return ExpressionError(message, value=expr, valid=describe_allowed(allowed_names))


def parse(expr: str, allowed_names: Collection[str] = ALLOWED_NAMES) -> ast.Expression:
    """Parse and whitelist-check ``expr``; the tree is then safe to walk with ``_eval``."""
    if not isinstance(expr, str) or not expr.strip():
        raise _fail("empty expression", str(expr), allowed_names)
    if len(expr) > MAX_LENGTH:
        raise _fail(f"expression longer than {MAX_LENGTH} characters", expr[:40] + "...",
                    allowed_names)
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise _fail(f"expression syntax error: {exc.msg}", expr, allowed_names) from None
    _check_node(tree.body, expr, allowed_names)
    return tree


def _check_node(node: ast.AST, expr: str, allowed: Collection[str]) -> None:
    """Refuse every node outside the whitelist (recursively), naming what was found."""
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise _fail(f"operator {type(node.op).__name__} is not allowed", expr, allowed)
        _check_node(node.left, expr, allowed)
        _check_node(node.right, expr, allowed)
    elif isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            raise _fail(f"operator {type(node.op).__name__} is not allowed", expr, allowed)
        _check_node(node.operand, expr, allowed)
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise _fail(f"only numbers are allowed as constants, not {node.value!r}", expr,
                        allowed)
    elif isinstance(node, ast.Name):
        if node.id in FUNCTIONS:
            raise _fail(f"{node.id} is a function; call it as {node.id}(...)", expr, allowed)
        if node.id not in allowed:
            raise _fail(f"unknown name {node.id!r}", expr, allowed)
    elif isinstance(node, ast.Call):
        _check_call(node, expr, allowed)
    else:
        raise _fail(f"{type(node).__name__} `{ast.unparse(node)}` is not allowed", expr, allowed)


def _check_call(node: ast.Call, expr: str, allowed: Collection[str]) -> None:
    """Only whitelisted functions, by plain name, with the right number of positional args."""
    if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
        raise _fail(f"function `{ast.unparse(node.func)}` is not allowed", expr, allowed)
    name = node.func.id
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise _fail(f"{name}() takes plain positional arguments", expr, allowed)
    low, high = _ARITY[name]
    if len(node.args) < low or (high is not None and len(node.args) > high):
        want = f"{low}" if low == high else f"at least {low}"
        raise _fail(f"{name}() takes {want} argument(s), got {len(node.args)}", expr, allowed)
    for arg in node.args:
        _check_node(arg, expr, allowed)


def check(expr: str, allowed_names: Collection[str] = ALLOWED_NAMES) -> None:
    """Raise ExpressionError unless ``expr`` uses only whitelisted names, functions and arithmetic."""
    parse(expr, allowed_names)


def names_used(expr: str) -> set[str]:
    """The variable names a valid expression reads (e.g. to know whether walltime_s is needed)."""
    tree = parse(expr, ALLOWED_NAMES)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in FUNCTIONS}


def evaluate(expr: str, names: Mapping[str, float]) -> float:
    """Evaluate ``expr`` with ``names`` bound; arithmetic faults raise ExpressionError."""
    allowed = tuple(names)
    tree = parse(expr, allowed)
    try:
        result = _eval(tree.body, names)
    except ZeroDivisionError:
        raise _fail("division by zero", expr, allowed) from None
    except (OverflowError, ValueError) as exc:
        raise _fail(f"arithmetic error: {exc}", expr, allowed) from None
    if isinstance(result, complex) or not math.isfinite(result):
        raise _fail(f"result {result!r} is not a finite real number", expr, allowed)
    return float(result)


def _eval(node: ast.AST, names: Mapping[str, float]) -> Any:
    """Walk a tree that ``parse`` has already whitelisted.

    Every value is a float, so a huge result overflows at once (OverflowError or inf)
    instead of growing an exact integer: ``(((9**64)**64)**64)**64`` must not hang.
    """
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return float(names[node.id])
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, names))
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, names), _eval(node.right, names)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise OverflowError(f"exponent {right} is larger than {_MAX_EXPONENT}")
        return _BINOPS[type(node.op)](left, right)
    # parse() refuses every other node: what is left is a call of a whitelisted function
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), type(node).__name__
    return float(FUNCTIONS[node.func.id](*(_eval(a, names) for a in node.args)))
