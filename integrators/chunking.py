"""Fixed row slices, so each stage works through a batch in cache-sized pieces.

Why: a 100k-row, 8-d batch makes every numpy temporary 6.4 MB, so each elementwise pass of
materialize, evaluate and training streams through main memory (and faults in fresh pages).
Working in slices of :data:`SLICE_ROWS` rows keeps the temporaries in the per-core L2 cache.

The slices depend on the batch size and this constant only, never on the machine, the worker
or the stage that runs them, and per-slice sums are combined in slice order: results stay
bit-identical wherever a batch runs. The constant is part of the numerical contract (it
decides the order of additions and of seeded random draws), so changing it changes the last
bits of every run's numbers.
"""

from __future__ import annotations

SLICE_ROWS = 8192


def row_slices(n: int) -> list[slice]:
    """[0, R), [R, 2R), ... covering n rows (R = SLICE_ROWS); one slice when n <= R."""
    return [slice(start, min(start + SLICE_ROWS, n)) for start in range(0, max(n, 1), SLICE_ROWS)]
