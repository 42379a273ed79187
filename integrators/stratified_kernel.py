"""The VEGAS+ stratified draw of one slice as one compiled loop (numba; imported only by
:mod:`~mainboard.integrators.kernels`, which falls back to numpy when this fails to import).

Per row and axis it performs the numpy path's operations (``StratifiedFill`` then
``GridTables._run`` and the stratum factor) one after the other, in the same order
and with the same roundings: u * step, plus the stratum's corner, floor, position in the
bin, the bin (the last one when the sum rounds up to N), lower edge + position * width,
capped below 1, and the Jacobian as the product of width * N over the axes in axis order,
times the stratum factor. No fast-math: every result is the numpy path's to the last bit,
on any CPU (tests/integrators/test_integrators_kernels.py holds them side by side).
"""

from __future__ import annotations

import numba
import numpy as np

ONE_BELOW = np.nextafter(1.0, 0.0)


@numba.njit(cache=True, nogil=True)
def stratified_slice(u: np.ndarray, step: np.ndarray, corners: np.ndarray,
                     starts: np.ndarray, factors: np.ndarray, lower: np.ndarray,
                     width: np.ndarray, nbins: int, x: np.ndarray, jac: np.ndarray,
                     bins: np.ndarray, scale: np.ndarray, lo: int) -> None:  # pragma: no cover
    """Rows lo .. lo + rows of a batch from their uniforms ``u`` (d, rows).

    ``corners`` (d, runs) and ``factors`` (runs,) belong to the batch's runs of strata,
    ``starts`` (runs + 1) are the runs' first rows; ``lower``/``width`` the grid's flat
    tables (axis j's bins at j * nbins); x, bins (d, n), jac and scale (n,) the batch's
    outputs."""
    d, rows = u.shape
    run = np.searchsorted(starts, lo, side="right") - 1
    following = starts[run + 1]
    for r in range(rows):
        row = lo + r
        while row >= following:
            run += 1
            following = starts[run + 1]
        product = 1.0
        for j in range(d):
            y = u[j, r] * step[j]
            y = y + corners[j, run]
            whole = np.floor(y)
            inside = y - whole
            b = int(whole)
            if b >= nbins:
                b = nbins - 1
            k = b + j * nbins
            w = width[k]
            value = lower[k] + inside * w
            if value > ONE_BELOW:
                value = ONE_BELOW
            x[j, row] = value
            bins[j, row] = b
            if j == 0:
                product = w * nbins
            else:
                product = product * (w * nbins)
        factor = factors[run]
        jac[row] = product * factor
        scale[row] = factor
