"""Stop conditions and iteration planning.

A run stops after an iteration when it has drawn ``max_samples`` or run ``max_iterations``,
or when its error meets ``absolute_error`` or ``relative_error`` (either suffices, as in Cuba)
once at least ``min_samples`` were drawn. The last iteration is cut short so a run never draws
more than ``max_samples``: exactly the requested number of samples.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mainboard.integrators.accumulators import Combined


def plan_iteration(stop: Any, batching: Any, samples_done: int, cap: int | None = None
                   ) -> list[int]:
    """Batch sizes for the next iteration (empty when the sample budget is spent); ``cap``
    bounds the iteration's samples (what the training phase still takes)."""
    size, count = int(batching.batch_size), int(batching.batches_per_iteration)
    budget = size * count if cap is None else min(size * count, cap)
    if stop.max_samples is not None:
        budget = min(budget, int(stop.max_samples) - samples_done)
    if budget <= 0:
        return []
    full, rest = divmod(budget, size)
    return [size] * full + ([rest] if rest else [])


def precision_met(stop: Any, result: Combined, kind: str) -> str | None:
    """Which error target the combined result meets, if any (complex uses the modulus)."""
    err, mean = result.error, result.mean
    if kind == "complex":
        err = np.array([math.hypot(*err)])
        mean = np.array([math.hypot(*mean)])
    if not (np.all(np.isfinite(err)) and np.all(np.isfinite(mean))):
        return None
    if stop.absolute_error is not None and np.all(err <= stop.absolute_error):
        return "absolute_error"
    if stop.relative_error is not None and np.all(err <= stop.relative_error * np.abs(mean)):
        return "relative_error"
    return None


def stop_reason(stop: Any, *, samples: int, iterations: int, result: Combined | None,
                kind: str) -> str | None:
    """Why the run should stop now, or None to go on."""
    if result is not None and samples >= stop.min_samples:
        met = precision_met(stop, result, kind)
        if met:
            return met
    if stop.max_samples is not None and samples >= stop.max_samples:
        return "max_samples"
    if stop.max_iterations is not None and iterations >= stop.max_iterations:
        return "max_iterations"
    return None
