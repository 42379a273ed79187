"""The VEGAS map of one slice, stratified or not, and its training sums as compiled loops
(numba; imported only by :mod:`~mainboard.integrators.kernels`, which falls back to numpy
when this fails to import).

Per row and axis it performs the numpy path's operations (``StratifiedFill`` then
``GridTables._run`` and the stratum factor) one after the other, in the same order
and with the same roundings: u * step, plus the stratum's corner, floor, position in the
bin, the bin (the last one when the sum rounds up to N), lower edge + position * width,
capped below 1, and the Jacobian as the product of width * N over the axes in axis order,
times the stratum factor. Classic VEGAS is the same loop over one run (step N, corner 0,
factor 1: u * N + 0 and J * 1 are u * N and J exactly). No fast-math: every result is
the numpy path's to the last bit, on any CPU (tests/integrators/test_integrators_kernels.py holds them
side by side).

Why axis by axis, run by run: inside a run the corner is one number and every operation
reads and writes contiguous rows of one axis; the row-major loop it replaces paid a run
lookup and eight strided stores per row, about 1.4x the time. Each axis goes in two loops:
the arithmetic up to the position in the bin (no table read: vector instructions), then
the two table lookups per row (LLVM keeps gathers scalar on this CPU family), with the
position parked in x in between: the same operations on the same doubles, 0.8x the time
of the one scalar loop it replaced (docs/performance.md).
"""

from __future__ import annotations

import numba
import numpy as np

ONE_BELOW = np.nextafter(1.0, 0.0)


@numba.njit(cache=True, nogil=True)
def _positions(u: np.ndarray, s: float, corner: float, top: int, x: np.ndarray,
               bins: np.ndarray) -> None:
    """One axis of one run of strata: y = u * s + corner, its bin min(floor(y), top) into
    ``bins`` and its position in the bin, y - floor(y), into ``x`` (for now). No table is
    read: the loop compiles to vector instructions."""
    for i in range(u.shape[0]):
        y = u[i] * s + corner
        whole = np.floor(y)
        bins[i] = min(int(whole), top)
        x[i] = y - whole


@numba.njit(cache=True, nogil=True)
def _through_bins(lower_j: np.ndarray, width_j: np.ndarray, scale_n: float, x: np.ndarray,
                  bins: np.ndarray, jac: np.ndarray, first: bool) -> None:
    """One axis of a slice: x from its position in the bin, lower edge + position * width,
    capped below 1, and the bin's width * N into the Jacobian (the first axis starts it).
    Two table lookups a row: this loop stays scalar."""
    for i in range(x.shape[0]):
        b = bins[i]
        w = width_j[b]
        x[i] = min(lower_j[b] + x[i] * w, ONE_BELOW)
        if first:
            jac[i] = w * scale_n
        else:
            jac[i] = jac[i] * (w * scale_n)


@numba.njit(cache=True, nogil=True)
def stratified_slice(u: np.ndarray, step: np.ndarray, corners: np.ndarray,
                     starts: np.ndarray, factors: np.ndarray, lower: np.ndarray,
                     width: np.ndarray, nbins: int, x: np.ndarray, jac: np.ndarray,
                     bins: np.ndarray, scale: np.ndarray, lo: int) -> None:
    """Rows lo .. lo + rows of a batch from their uniforms ``u`` (d, rows).

    ``corners`` (d, runs) and ``factors`` (runs,) belong to the batch's runs of strata,
    ``starts`` (runs + 1) are the runs' first rows; ``lower``/``width`` the grid's flat
    tables (axis j's bins at j * nbins); x, bins (d, n), jac and scale (n,) the batch's
    outputs."""
    d, rows = u.shape
    hi = lo + rows
    first = np.searchsorted(starts, lo, side="right") - 1
    scale_n = float(nbins)
    for j in range(d):
        run, r0 = first, lo
        while r0 < hi:
            r1 = min(starts[run + 1], hi)
            _positions(u[j, r0 - lo:r1 - lo], step[j], corners[j, run], nbins - 1,
                       x[j, r0:r1], bins[j, r0:r1])
            r0, run = r1, run + 1
        _through_bins(lower[j * nbins:(j + 1) * nbins], width[j * nbins:(j + 1) * nbins],
                      scale_n, x[j, lo:hi], bins[j, lo:hi], jac[lo:hi], j == 0)
    run, r0 = first, lo
    while r0 < hi:
        r1 = min(starts[run + 1], hi)
        factor = factors[run]
        for row in range(r0, r1):
            jac[row] = jac[row] * factor
            scale[row] = factor
        r0, run = r1, run + 1


@numba.njit(cache=True, nogil=True)
def training_sums(bins: np.ndarray, f2: np.ndarray, scale: np.ndarray, use_scale: bool,
                  mask: np.ndarray, use_mask: bool, slice_rows: int, sums: np.ndarray,
                  counts: np.ndarray) -> None:
    """Per-axis per-bin sums of ``f2`` and counts of one grid (``GridTables.training`` for
    G = 1) into ``sums`` (d, N) and ``counts`` (d, N), from bins (d, n).

    As the numpy path adds them: each slice of ``slice_rows`` rows sums its rows in row
    order into zeros (one bincount per axis), then the slice's sums are added to the
    totals in slice order; rows with a false ``mask`` (when ``use_mask``) are left out of
    both. With ``use_scale`` each f2 is first divided by its stratum factor squared (what
    ``VegasSampler.training`` does before: f2 / (s * s)), once per row. Then axis after
    axis: a contiguous run of bins and one axis's sums in L1 (0.8x the time of a loop over
    the rows doing every axis)."""
    d, n = bins.shape
    part = np.zeros(sums.shape)
    f = np.empty(min(slice_rows, n))
    for lo in range(0, n, slice_rows):
        hi = min(lo + slice_rows, n)
        rows = hi - lo
        part[:, :] = 0.0
        for r in range(rows):
            f[r] = f2[lo + r] / (scale[lo + r] * scale[lo + r]) if use_scale else f2[lo + r]
        for j in range(d):
            bins_j, part_j, counts_j = bins[j, lo:hi], part[j], counts[j]
            for r in range(rows):
                if use_mask and not mask[lo + r]:
                    continue
                k = bins_j[r]
                part_j[k] += f[r]
                counts_j[k] += 1
        sums += part
