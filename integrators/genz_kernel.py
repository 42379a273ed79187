"""The row sums of the separable Genz families as one compiled loop (numba; imported only
by :mod:`~mainboard.integrators.kernels`, which falls back to numpy when this fails to
import).

Why: numpy evaluates ``exp(-sum (a (x - u))^2)`` in five passes over an (n, d) temporary
(subtract, scale, square, sum, negate) before the exp; on the 8-d gaussian that is about
two thirds of the integrand's time. Here the terms are added axis by axis into the row
sums, reading each coordinate's contiguous column once; the numpy finish
(``genz.COLUMN_SUMS``: exp, cos, power) is applied after.

The same numbers to the last bit: for a column-major array numpy's sum over axis 1 starts
from the first axis's term and adds the next axes' terms one after the other, and so does
this loop; each term is the same operations in the same order. No fast-math.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def column_sums(cols: np.ndarray, lo: int, hi: int, a: np.ndarray, u: np.ndarray,
                term: int, out: np.ndarray) -> None:
    """Rows lo .. hi of the points ``cols`` (d, n; row j is coordinate j): into ``out``
    (hi - lo,) the sum over j of the term ``term`` (0: (a_j (x_j - u_j))^2, 1:
    a_j |x_j - u_j|, 2: x_j a_j), axis after axis."""
    rows = hi - lo
    for j in range(cols.shape[0]):
        aj, uj = a[j], u[j]
        col = cols[j, lo:hi]
        for i in range(rows):
            if term == 0:
                t = (col[i] - uj) * aj
                t = t * t
            elif term == 1:
                t = abs(col[i] - uj) * aj
            else:
                t = col[i] * aj
            out[i] = t if j == 0 else out[i] + t
