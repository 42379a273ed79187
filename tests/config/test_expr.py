"""The safe expression evaluator: whitelisted arithmetic works, everything else is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from mainboard.config import expr
from mainboard.errors import ConfigError, ExpressionError

NAMES = {"attempt": 3, "walltime_s": 7200, "num_cpus": 8}


@pytest.mark.parametrize(("source", "expected"), [
    ("min(100, attempt * 50)", 100),
    ("max(1, num_cpus - 2)", 6),
    ("walltime_s / 3600", 2),
    ("walltime_s // 7000", 1),
    ("attempt % 2", 1),
    ("2 ** attempt", 8),
    ("-attempt + +4", 1),
    ("ceil(attempt * 1.5)", 5),
    ("floor(attempt * 1.5)", 4),
    ("min(attempt, num_cpus, 2)", 2),
    ("(attempt + 1) * 2.5", 10),
    ("  42  ", 42),
    ("1e3", 1000),
])
def test_evaluates_whitelisted_arithmetic(source: str, expected: float) -> None:
    result = expr.evaluate(source, NAMES)
    assert result == pytest.approx(expected)
    assert isinstance(result, float)


@pytest.mark.parametrize(("source", "fragment"), [
    ("__import__('os').system('x')", "not allowed"),
    ("attempt.real", "Attribute"),
    ("open('/etc/passwd')", "function `open`"),
    ("[1, 2][0]", "Subscript"),
    ("(lambda: 1)()", "not allowed"),
    ("memory * 2", "unknown name 'memory'"),
    ("attempt if attempt else 1", "IfExp"),
    ("attempt < 2", "Compare"),
    ("attempt and 2", "BoolOp"),
    ("'a' * 3", "only numbers"),
    ("True + 1", "only numbers"),
    ("[x for x in (1, 2)]", "ListComp"),
    ("(y := 3)", "NamedExpr"),
    ("f'{attempt}'", "JoinedStr"),
    ("min(*[1, 2])", "plain positional"),
    ("max(1, 2, key=abs)", "plain positional"),
    ("min(1)", "at least 2"),
    ("ceil(1, 2)", "takes 1"),
    ("min + 1", "is a function"),
    ("attempt @ attempt", "MatMult"),
    ("~attempt", "Invert"),
    ("attempt << 2", "LShift"),
    ("min(100, attempt *", "syntax error"),
    ("", "empty"),
    ("1 +" + " 1 +" * 300 + " 1", "longer than"),
])
def test_refuses_everything_outside_the_whitelist(source: str, fragment: str) -> None:
    with pytest.raises(ExpressionError) as info:
        expr.check(source)
    message = str(info.value)
    assert fragment in message
    # the hint lists what is allowed
    assert "attempt, walltime_s, num_cpus" in message and "min(), max(), ceil(), floor()" in message
    assert isinstance(info.value, ConfigError)  # so the CLI exits 2 with one line


def test_refused_code_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(ExpressionError):
        expr.evaluate(f"__import__('os').system('touch {marker}')", NAMES)
    with pytest.raises(ExpressionError):
        expr.evaluate(f"open('{marker}', 'w')", NAMES)
    assert not marker.exists()


def test_allowed_names_are_per_call() -> None:
    expr.check("attempt * 2", ("attempt",))
    with pytest.raises(ExpressionError, match="unknown name 'walltime_s'") as info:
        expr.check("walltime_s * 2", ("attempt", "num_cpus"))
    assert "names attempt, num_cpus;" in str(info.value)


@pytest.mark.parametrize(("source", "fragment"), [
    ("attempt / (attempt - 3)", "division by zero"),
    ("attempt // 0", "division by zero"),
    ("attempt % 0", "division by zero"),
    ("2 ** 100000", "exponent"),
    ("ceil(1e308 * 10)", "arithmetic error"),
    ("1e308 * 10", "not a finite"),
    ("(-8) ** 0.5", "not a finite real"),
    ("(((9 ** 64) ** 64) ** 64) ** 64", "arithmetic error"),  # exact ints would run for hours
    ("ceil(ceil(1e300) ** 64) ** 64", "arithmetic error"),
    ("floor(1e308) * 10", "not a finite"),
])
def test_arithmetic_faults_are_expression_errors(source: str, fragment: str) -> None:
    with pytest.raises(ExpressionError, match=fragment):
        expr.evaluate(source, NAMES)


def test_names_used() -> None:
    assert expr.names_used("min(walltime_s, attempt * 2) + 1") == {"walltime_s", "attempt"}
    assert expr.names_used("ceil(2.5)") == set()
