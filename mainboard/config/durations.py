"""Durations as people and schedulers write them: "2h", "01:30:00", "1-12:00:00", 5400.

Used for queue limits and job walltimes in mainboard.toml, and by anything that takes a
``--walltime``. Integers are seconds (unlike SLURM, where a bare number means minutes).
"""

from __future__ import annotations

import math
import re
from typing import Any

from mainboard.errors import ConfigError, NotPositive

DURATION_FORMS = ('"HH:MM:SS", "MM:SS", "D-HH:MM:SS", "D-HH", "90s", "30m", "2h", "1d", '
                  "or an integer number of seconds")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_UNIT_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_CLOCK_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_duration(value: Any) -> int:
    """Seconds from an int or "HH:MM:SS", "MM:SS", "D-HH:MM:SS", "90s", "30m", "2h", "1d"."""
    bad = ConfigError("not a duration", value=value, valid=DURATION_FORMS)
    if isinstance(value, bool):
        raise bad
    if isinstance(value, (int, float)):
        if value < 0 or not math.isfinite(value):
            raise ConfigError("a duration cannot be negative", value=value, valid=DURATION_FORMS)
        return math.ceil(value)
    if not isinstance(value, str):
        raise bad
    text = value.strip().lower()
    if text.isdigit():
        return int(text)
    if match := _UNIT_RE.match(text):
        return math.ceil(float(match.group(1)) * _UNITS[match.group(2)])
    match = _CLOCK_RE.match(text)
    if not match or (match.group(1) is None and match.group(3) is None):
        raise bad
    days, first, second, third = match.groups()
    parts = [int(p) for p in (first, second, third) if p is not None]
    if days is not None:  # SLURM: D-HH, D-HH:MM, D-HH:MM:SS
        h, m, s = (parts + [0, 0])[:3]
        seconds = int(days) * 86400 + h * 3600 + m * 60 + s
    elif len(parts) == 2:  # MM:SS
        h, (m, s) = 0, parts
        seconds = m * 60 + s
    else:  # HH:MM:SS
        h, m, s = parts
        seconds = h * 3600 + m * 60 + s
    if m >= 60 or s >= 60 or (days is not None and h >= 24):
        raise ConfigError("minutes and seconds must be below 60 (hours below 24 after a day)",
                          value=value, valid=DURATION_FORMS)
    return seconds


def positive_duration(value: Any) -> int:
    """Seconds from a duration, refusing zero: a walltime, limit or timeout of 0 never runs.

    The one check behind config limits, job walltimes and ``--walltime``-style flags.
    """
    seconds = parse_duration(value)
    if seconds <= 0:
        raise NotPositive("must be greater than zero", value=value, valid=DURATION_FORMS)
    return seconds
