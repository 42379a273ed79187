"""Python integrands (``kind = "python"``) for the coordinator tests: slow, and broken on purpose.

Workers import them as ``tests.support.run_integrands:<name>`` (local workers get the caller's
working directory on PYTHONPATH, exactly as a user's project module would).
"""

from __future__ import annotations

import os
import time

import numpy as np

import mainboard


def slow_gauss(x: np.ndarray, delay: float = 0.0, a: float = 5.0) -> np.ndarray:
    """exp(-a^2 |x - 1/2|^2) after sleeping ``delay`` seconds per batch (time to kill a worker)."""
    time.sleep(delay)
    return np.exp(-(a * a) * ((x - 0.5) ** 2).sum(axis=1))


def gated_gauss(x: np.ndarray, gate: str, a: float = 5.0, budget: float = 120.0) -> np.ndarray:
    """slow_gauss once the file ``gate`` exists: a run held live until a test opens it (an
    event, not a delay); the budget only bounds a test that never opens it."""
    deadline = time.monotonic() + budget
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {gate} never opened")
        time.sleep(0.01)
    return slow_gauss(x, 0.0, a)


def held_gauss(x: np.ndarray, ledger: str, gate: str, free_rows: int, a: float = 5.0,
               budget: float = 120.0) -> np.ndarray:
    """slow_gauss whose rows past the first ``free_rows`` of the run (summed over every worker
    in the file ``ledger``) wait for the file ``gate``: a run held inside its second iteration
    until a test has done what it must there (an event, not a delay); the budget only bounds
    a test that never opens it."""
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{x.shape[0]}\n".encode())
    finally:
        os.close(fd)
    with open(ledger) as file:
        asked = sum(int(n) for n in file.read().split())
    deadline = time.monotonic() + budget
    while asked > free_rows and not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {gate} never opened")
        time.sleep(0.01)
    return slow_gauss(x, 0.0, a)


def spanned_gauss(x: np.ndarray, delay: float = 0.0, a: float = 5.0) -> np.ndarray:
    """slow_gauss inside a user span (``mainboard.span``), its rows as the span's attribute."""
    with mainboard.span("user-gauss", rows=int(x.shape[0])):
        return slow_gauss(x, delay, a)


def holed_gauss(x: np.ndarray, a: float = 5.0) -> np.ndarray:
    """slow_gauss with NaN where x_0 < 0.02: non-finite values the run leaves out of its
    sums and its training (the training mask)."""
    out = slow_gauss(x, 0.0, a)
    out[x[:, 0] < 0.02] = np.nan
    return out


def wrong_shape(x: np.ndarray) -> np.ndarray:
    """Two columns where one value per point is expected."""
    return np.ones((x.shape[0], 2))


def wrong_dtype(x: np.ndarray) -> np.ndarray:
    """Strings instead of numbers."""
    return np.full(x.shape[0], "one")


def explode(x: np.ndarray) -> np.ndarray:
    """Raises, as buggy user code does."""
    raise ZeroDivisionError("integrand exploded on purpose")
