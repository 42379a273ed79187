"""Lepage's VEGAS map as array functions over a stack of grids.

Edges have shape (G, d, N + 1): G independent grids (one shared grid, or one per discrete
channel), d dimensions, N bins each. A uniform point y in [0, 1)^d falls in bin i = floor(y N)
of every dimension and maps linearly inside that bin onto [edge_i, edge_{i+1}); the Jacobian is
prod_j N * width_ij. Training data are per-grid, per-dimension, per-bin sums of (w f)^2 and
sample counts: plain arrays that add across batches, so any number of workers can produce them.
"""

from __future__ import annotations

import sys

import numpy as np

TINY = 10.0 ** (sys.float_info.min_10_exp + 50)
ONE_BELOW = np.nextafter(1.0, 0.0)


def uniform_edges(groups: int, dim: int, bins: int) -> np.ndarray:
    """G identical grids with N equal bins per dimension."""
    return np.broadcast_to(np.linspace(0.0, 1.0, bins + 1), (groups, dim, bins + 1)).copy()


class GridTables:
    """Flattened lower edges and widths, precomputed once per grid version for fast lookups."""

    def __init__(self, edges: np.ndarray) -> None:
        self.edges = edges
        self.groups, self.dim, n1 = edges.shape
        self.bins = n1 - 1
        self.lower = np.ascontiguousarray(edges[..., :-1]).reshape(-1)
        self.width = np.ascontiguousarray(np.diff(edges, axis=-1)).reshape(-1)
        self.bin_dtype = np.int16 if self.bins <= np.iinfo(np.int16).max else np.int32
        self.offsets = (np.arange(self.dim, dtype=np.intp) * self.bins)[:, None]

    def flat_index(self, bins: np.ndarray, group: np.ndarray | None) -> np.ndarray:
        """Index into the flattened (G, d, N) tables for bins (d, n) and groups (n,)."""
        k = bins + self.offsets  # promotes to intp: a new array, bins untouched
        if group is not None and self.groups > 1:
            k += (group.astype(np.intp) * (self.dim * self.bins))[None, :]
        return k

    def map(self, y: np.ndarray, group: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Uniform y (d, n) -> points x (d, n), Jacobians (n,), bin numbers (d, n).

        Dimension-major layout: every per-dimension operation runs over contiguous memory, and
        the product of the d Jacobian factors is a fast reduction over the first axis.
        """
        # y < 1 implies y * N < N after IEEE rounding, so floor(y N) is a valid bin number.
        frac = y * self.bins
        whole = np.floor(frac)
        frac -= whole
        bins = whole.astype(self.bin_dtype)
        k = self.flat_index(bins, group)
        width = np.take(self.width, k)
        x = np.take(self.lower, k)
        frac *= width
        x += frac
        np.minimum(x, ONE_BELOW, out=x)
        width *= self.bins
        jac = np.prod(width, axis=0)
        return x, jac, bins

    def training(self, bins: np.ndarray, group: np.ndarray | None, f2: np.ndarray,
                 mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Per-bin sums of f2 and sample counts, shape (G, d, N), from bins (d, n).

        ``mask`` (n,) drops samples (non-finite values) from both sums and counts.
        """
        if mask is not None:
            bins, f2 = bins[:, mask], f2[mask]
            group = None if group is None else group[mask]
        k = self.flat_index(bins, group).ravel()
        size = self.groups * self.dim * self.bins
        shape = (self.groups, self.dim, self.bins)
        f2_rows = np.broadcast_to(f2[None, :], bins.shape).ravel()
        sums = np.bincount(k, weights=f2_rows, minlength=size).reshape(shape)
        counts = np.bincount(k, minlength=size).astype(np.float64).reshape(shape)
        return sums, counts


def _smooth(avg: np.ndarray) -> np.ndarray:
    """VEGAS smoothing along the last axis: (7, 1)/8 at the ends, (1, 6, 1)/8 inside."""
    out = np.empty_like(avg)
    out[..., 0] = 7.0 * avg[..., 0] + avg[..., 1]
    out[..., -1] = 7.0 * avg[..., -1] + avg[..., -2]
    out[..., 1:-1] = avg[..., :-2] + 6.0 * avg[..., 1:-1] + avg[..., 2:]
    return np.abs(out) / 8.0


def adapt_edges(edges: np.ndarray, sums: np.ndarray, counts: np.ndarray,
                alpha: float) -> np.ndarray:
    """New edges from training data, as in Lepage's VEGAS (and the vegas package).

    Per grid and dimension: average (w f)^2 per bin, smooth, normalise, compress with
    ((1 - r) / ln(1 / r))^alpha, then place the new edges so every new bin holds an equal share
    of that weight, interpolating linearly inside the old bins. Rows without data keep their
    edges. ``alpha == 0`` freezes the grid.
    """
    if alpha == 0:
        return edges.copy()
    avg = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    smooth = _smooth(avg)
    total = smooth.sum(axis=-1, keepdims=True)
    r = np.where(total > 0, smooth / np.where(total > 0, total, 1.0) + TINY, TINY)
    damp = r <= 0.99999999
    with np.errstate(divide="ignore", invalid="ignore"):
        compressed = np.where(damp, (-(1.0 - r) / np.log(np.where(damp, r, 0.5))) ** alpha, r)
    new = edges.copy()
    bins = edges.shape[-1] - 1
    cum = np.concatenate([np.zeros(compressed.shape[:-1] + (1,)),
                          np.cumsum(compressed, axis=-1)], axis=-1)
    fractions = np.arange(1, bins) / bins
    trained = (counts.sum(axis=-1) > 0) & (sums.sum(axis=-1) > 0)
    for g, j in zip(*np.nonzero(trained), strict=True):
        targets = cum[g, j, -1] * fractions
        new[g, j, 1:-1] = np.interp(targets, cum[g, j], edges[g, j])
    return new
