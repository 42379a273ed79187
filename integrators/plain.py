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
        # tolist() already gives Python numbers; only non-finite floats (and objects) need
        # the walk. A VEGAS+ snapshot's arrays hold tens of thousands of numbers: walking
        # each cost 37 ms of the coordinator's time between two iterations.
        if obj.dtype.kind in "biu" or (obj.dtype.kind == "f" and np.isfinite(obj).all()):
            return obj.tolist()
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
