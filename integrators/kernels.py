"""Compiled twins of numpy hot paths, used when they pay and numba is there.

Why: the VEGAS+ draw puts every sample in its stratum, a per-row corner that numpy can only
gather or repeat in extra passes over the batch, and the grid's training data are two
bincounts per axis and slice; on the 8-d gaussian these two cost about as much as drawing
the uniforms and evaluating the integrand together (docs/performance.md, issue 30). One
compiled loop per slice (:mod:`.grid_kernel`) maps the draw, classic or stratified, and one
adds the training sums of a batch.

A kernel computes exactly its numpy twin's numbers (same operations, same order, no
fast-math), so which one ran is invisible in every result: a fleet may mix hosts with and
without numba, and a process may switch from one to the other mid-run, and stay
bit-identical. Loading numba and the cached machine code costs about 0.3 s once per
process, as much as numpy's extra passes over some 5 million rows; so a process draws its
first :data:`LOAD_AFTER_ROWS` rows (VEGAS, stratified or not) with numpy and loads the kernels then
(rent until renting has cost what buying does: never more than twice the better choice,
and nothing for the short runs and small workers that never get there). Batches under
:data:`KERNEL_ROWS` rows always keep to numpy; ``MAINBOARD_KERNELS=0`` keeps every batch
there; :func:`preload` loads at once (benchmarks, long-lived workers).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from mainboard.integrators import genz
from mainboard.integrators.chunking import SLICE_ROWS, row_slices
from mainboard.integrators.grid import GridTables
from mainboard.names import lazy

#: Batches of fewer rows keep to numpy.
KERNEL_ROWS = 16384
#: VEGAS rows a process draws with numpy before it loads the kernels.
LOAD_AFTER_ROWS = 1 << 22
#: ``MAINBOARD_KERNELS=0`` keeps every batch on numpy (to compare, or to rule kernels out).
ENV = "MAINBOARD_KERNELS"

_LOCK = threading.Lock()
_LOADED: dict[str, Any] = {}
_DRAWN = {"stratified": 0}  # rows drawn with numpy so far, in this process


def stratified_kernel(rows: int) -> Callable[..., None] | None:
    """The compiled draw (stratified or classic) for a batch of ``rows`` rows, or None:
    numpy then (the rows are counted towards loading the kernels)."""
    if rows < KERNEL_ROWS or os.environ.get(ENV, "1") == "0":
        return None
    with _LOCK:
        if "stratified" not in _LOADED:
            if _DRAWN["stratified"] < LOAD_AFTER_ROWS:
                _DRAWN["stratified"] += rows
                return None
            _LOADED.update(_import_kernels())
        return _LOADED["stratified"]


def training_kernel(rows: int) -> Callable[..., None] | None:
    """The compiled training sums for a batch of ``rows`` rows once the draw's kernel is
    loaded (the draw counts the rows towards loading), else None: numpy."""
    if rows < KERNEL_ROWS or os.environ.get(ENV, "1") == "0":
        return None
    return _LOADED.get("training")


def preload() -> bool:
    """Load the kernels now (whatever has been drawn); whether they are there."""
    with _LOCK:
        if "stratified" not in _LOADED:
            _LOADED.update(_import_kernels())
        return _LOADED["stratified"] is not None


def _import_kernels() -> dict[str, Callable[..., None] | None]:
    try:  # numba is optional: the registry imports it here, once a process has drawn enough
        return {"stratified": lazy("numba.stratified"), "training": lazy("numba.training"),
                "columns": lazy("numba.columns")}
    except Exception:  # no numba, or one whose llvmlite does not load: numpy does it
        return {"stratified": None, "training": None, "columns": None}


def column_values(kind: str, a: np.ndarray, u: np.ndarray
                  ) -> Callable[[np.ndarray, int, int], np.ndarray | None] | None:
    """For a Genz family that is a sum over the axes (``genz.COLUMN_SUMS``), the compiled
    twin of its numpy function: ``values(cols, lo, hi)``, the values at rows lo .. hi of a
    batch whose points come by column (``cols`` = x.T, C-contiguous, as the VEGAS map
    leaves them), or None while the kernels are not loaded in this process (numpy then);
    None for the other families."""
    form = genz.COLUMN_SUMS.get(kind)
    if form is None:
        return None
    term, finish = form
    a, u = np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(u, dtype=np.float64)

    def values(cols: np.ndarray, lo: int, hi: int) -> np.ndarray | None:
        kernel = _LOADED.get("columns")
        if kernel is None or os.environ.get(ENV, "1") == "0":
            return None
        out = np.empty(hi - lo)
        kernel(cols, lo, hi, a, u, term, out)
        return finish(out, u, cols.shape[0])

    return values


def stratified_draw(kernel: Callable[..., None], rng: np.random.Generator, n: int,
                    tables: GridTables, step: np.ndarray, corners: np.ndarray,
                    starts: np.ndarray, factors: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """(x (d, n), Jacobians with the stratum factor (n,), bins (d, n), factors (n,), whether
    every point is in [0, 1)^d) of a stratified batch: the uniforms drawn slice by slice
    exactly as the numpy path draws them, each slice mapped by ``kernel``. ``corners`` (d,
    runs), ``starts`` (runs + 1) and ``factors`` (runs,) describe the batch's runs of
    strata."""
    d = tables.dim
    x, jac, scale = np.empty((d, n)), np.empty(n), np.empty(n)
    bins = np.empty((d, n), dtype=tables.bin_dtype)
    slices = row_slices(n)
    buffer = np.empty(d * (slices[0].stop - slices[0].start))
    corners = np.ascontiguousarray(corners)
    for sl in slices:
        part = buffer[:d * (sl.stop - sl.start)].reshape(d, sl.stop - sl.start)
        rng.random(out=part)
        kernel(part, step, corners, starts, factors, tables.lower, tables.width,
               tables.bins, x, jac, bins, scale, sl.start)
    return x, jac, bins, scale, maps_into_cube(tables, step, corners)


def maps_into_cube(tables: GridTables, step: np.ndarray, corners: np.ndarray) -> bool:
    """Whether the map puts every uniform u in [0, 1) into [0, 1): true when the bins'
    lower edges and widths, the strata's step and corners are finite and >= 0. Then
    y = u * step + corner is finite and >= 0, y - floor(y) is exact and in [0, 1), and
    lower + (y - floor(y)) * width rounds to a number >= 0, which the cap keeps below 1.

    Why: a look at d x N table entries instead of a pass over the batch's d x n points
    (the materialize stage's range check, 7% of a worker's CPU on the 8-d gaussian)."""
    return all(bool(np.isfinite(a).all() and (a >= 0.0).all())
               for a in (tables.lower, tables.width, step, corners))


def classic_draw(kernel: Callable[..., None], rng: np.random.Generator, n: int,
                 tables: GridTables) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(x, Jacobians, bins, in the cube) of an unstratified batch of one grid, as
    ``tables.draw(rng, n)`` gives them: one run over the whole batch, step N, corner 0,
    factor 1 (exact no-ops)."""
    d = tables.dim
    x, jac, bins, _, inside = stratified_draw(
        kernel, rng, n, tables, np.full(d, float(tables.bins)), np.zeros((d, 1)),
        np.array([0, n], dtype=np.intp), np.ones(1))
    return x, jac, bins, inside


def grid_training(kernel: Callable[..., None], tables: GridTables, bins: np.ndarray,
                  f2: np.ndarray, mask: np.ndarray | None, scale: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``tables.training(bins, None, f2 / scale ** 2, mask)`` of a one-grid table, compiled
    (``scale`` None: f2 as it is): per-bin sums and counts, shape (1, d, N), the same
    numbers in the same order."""
    d, nbins = tables.dim, tables.bins
    sums, counts = np.zeros((d, nbins)), np.zeros((d, nbins), dtype=np.int64)
    keep = np.ones(0, dtype=bool) if mask is None else np.ascontiguousarray(mask)
    factors = np.ones(0) if scale is None else np.ascontiguousarray(scale)
    kernel(np.ascontiguousarray(bins), np.ascontiguousarray(f2), factors, scale is not None,
           keep, mask is not None, SLICE_ROWS, sums, counts)
    return sums[None], counts.astype(np.float64)[None]
