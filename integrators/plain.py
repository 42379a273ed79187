"""Conversion of numerics state to plain JSON-safe data (for NDJSON receipts and snapshots)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def to_plain(obj: Any) -> Any:
    """Arrays -> nested lists, numpy scalars -> Python numbers, recursively; floats round-trip
    exactly through JSON. Non-finite floats become the strings 'inf', '-inf', 'nan'."""
    if isinstance(obj, np.ndarray):
        return to_plain(obj.tolist())
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return to_plain(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj
