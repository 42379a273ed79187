"""Python targets for tests/integrators/test_numerics_unusual_data.py and
test_engine_guards.py: an integrand of a discrete domain that is not finite in one corner,
an observable of the discrete index, and a column result."""

from __future__ import annotations

import numpy as np


def channel_peak(x: np.ndarray, idx: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """scale * (1 + channel) * x0, NaN where x0 < 0.05 (a corner the sums leave out)."""
    out = scale * (1.0 + idx[:, 0]) * x[:, 0]
    return np.where(x[:, 0] < 0.05, np.nan, out)


def channel_and_x(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """channel + x0: an observable in [0, channels)."""
    return idx[:, 0] + x[:, 0]


def as_column(x: np.ndarray) -> np.ndarray:
    """x0 as an (n, 1) column, as many user functions return one value per point."""
    return x[:, :1]
