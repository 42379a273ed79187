"""A run's goal (``[stop] deadline``, ``budget_usd``, ``budget_core_hours``) and the
forecast arithmetic: numbers in, numbers out, no clock of its own.

Why here: the run file refuses a malformed deadline at load (pure), the coordinator
measures how far the error is from its target, and the fleet keeper sizes pools from
the same formulas; one place, unit-tested with made-up numbers.

The error of a Monte Carlo estimate falls as 1/sqrt(n): after ``n`` samples with error
``err``, reaching ``target`` takes ``n (err/target)^2`` samples in all, so
``n (err/target)^2 - n`` more; halving the error takes 4x the samples (3n more).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from mainboard.errors import SpecError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(?:\d+(?:\.\d+)?\s*[smhd]\s*)+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_CLOCK = re.compile(r"^\s*([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?\s*$")
DEADLINE_FORMS = ('a duration ("20m", "1h30m", "90s") or a time of day in the local zone '
                  '("18:00", "18:00:30") or a date and time ("2026-12-05T18:00", local '
                  'unless it names its zone)')


def parse_deadline(text: Any) -> tuple[str, Any]:
    """``("duration", seconds)``, ``("clock", (h, m, s))`` or ``("at", datetime)``; a
    SpecError naming ``deadline`` when it is none of them."""
    if not isinstance(text, str):
        raise SpecError("deadline", "must be a string", text, valid=DEADLINE_FORMS)
    if _DURATION.match(text):
        seconds = sum(float(v) * _UNITS[u] for v, u in _PART.findall(text))
        if seconds <= 0:
            raise SpecError("deadline", "a duration must be longer than 0 s", text,
                            valid=DEADLINE_FORMS)
        return "duration", seconds
    clock = _CLOCK.match(text)
    if clock:
        return "clock", (int(clock[1]), int(clock[2]), int(clock[3] or 0))
    try:
        return "at", datetime.fromisoformat(text.strip())
    except ValueError:
        raise SpecError("deadline", "is not a duration, a time of day or a date and time",
                        text, valid=DEADLINE_FORMS) from None


def resolve_deadline(text: str, now: datetime) -> datetime:
    """The deadline as an absolute UTC time, from ``now`` (aware, the run's start): a
    duration after it, a time of day today in ``now``'s zone; ValueError when that is not
    after ``now`` (a deadline in the past)."""
    kind, value = parse_deadline(text)
    local = now.astimezone()
    if kind == "duration":
        at = local + timedelta(seconds=value)
    elif kind == "clock":
        at = local.replace(hour=value[0], minute=value[1], second=value[2], microsecond=0)
    else:
        at = value if value.tzinfo is not None else value.replace(tzinfo=local.tzinfo)
    if at <= now:
        raise ValueError(f"deadline {text!r} is in the past ({at.astimezone().isoformat()} "
                         f"is before now, {local.replace(microsecond=0).isoformat()})")
    return at.astimezone(UTC)


def error_ratio(stop: Any, estimate: Any, error: Any) -> float | None:
    """err/target of the run's worst component under the target that is closer to being
    met (either suffices, as in :func:`~mainboard.integrators.stop.precision_met`); None
    without an error target or a finite estimate. ``estimate``/``error``: a number, a
    list, or ``{"real", "imag"}`` for a complex value (its modulus)."""
    est, err = _flat(estimate), _flat(error)
    if est is None or err is None or len(est) != len(err):
        return None
    if isinstance(estimate, dict):  # complex: {"real", "imag"}, taken as a modulus
        est, err = [math.hypot(*est)], [math.hypot(*err)]
    ratios = []
    if getattr(stop, "absolute_error", None) is not None:
        ratios.append(max(e / stop.absolute_error for e in err))
    if getattr(stop, "relative_error", None) is not None:
        worst = [e / (stop.relative_error * abs(m)) if m else math.inf
                 for e, m in zip(err, est, strict=True)]
        ratios.append(max(worst))
    finite = [r for r in ratios if math.isfinite(r)]
    return min(finite) if finite else None


def _flat(value: Any) -> list[float] | None:
    if isinstance(value, dict):
        value = [value.get("real"), value.get("imag")]
    if isinstance(value, int | float):
        value = [value]
    if not isinstance(value, list) or not value:
        return None
    try:
        out = [float(v) for v in value]
    except (TypeError, ValueError):
        return None
    return out if all(math.isfinite(v) for v in out) else None


def samples_to_target(n: int, ratio: float) -> int:
    """More samples until the error meets its target: ``n ratio^2 - n`` (0 once met)."""
    return max(0, math.ceil(n * ratio * ratio - n)) if ratio > 1 else 0


def halving_samples(n: int) -> int:
    """More samples to halve the error from ``n``: 4x in all."""
    return 3 * n


def allocations_needed(samples: float, per_alloc_s: float, seconds: float) -> int | None:
    """Allocations that draw ``samples`` in ``seconds`` at ``per_alloc_s`` samples/s each
    (None: no rate or no time left)."""
    if samples <= 0:
        return 0
    if per_alloc_s <= 0 or seconds <= 0:
        return None
    return math.ceil(samples / (per_alloc_s * seconds))


__all__ = ["DEADLINE_FORMS", "allocations_needed", "error_ratio", "halving_samples",
           "parse_deadline", "resolve_deadline", "samples_to_target"]
