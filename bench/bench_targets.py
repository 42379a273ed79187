"""Python integrands for bench_integrate.py (imported by its workers as ``bench_targets``)."""

from __future__ import annotations

import numpy as np


def burn(x: np.ndarray, rounds: int = 100, a: float = 5.0) -> np.ndarray:
    """An expensive integrand: the 8-d Genz gaussian after ``rounds`` passes of numpy work.

    The extra work multiplies by one (sin^2 + cos^2) so the value is the gaussian's, while
    the CPU time per sample grows linearly with ``rounds`` (calibrated by the benchmark).
    """
    y = x.sum(axis=1)
    one = np.ones_like(y)
    for _ in range(rounds):
        s = np.sin(y)
        c = np.cos(y)
        one = one * (s * s + c * c)
        y = y + 1e-3
    return one * np.exp(-(a * a) * ((x - 0.5) ** 2).sum(axis=1))


def sleepy(x: np.ndarray, ms: float = 20.0) -> np.ndarray:
    """A simulated evaluation of fixed cost: sleeps ``ms`` per batch (the GIL released, so a
    thread pool holds many of these at once) and integrates to 1."""
    import time

    time.sleep(ms / 1000.0)
    return np.ones(x.shape[0])
