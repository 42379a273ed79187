"""Lepage's VEGAS map as array functions over a stack of grids.

Edges have shape (G, d, N + 1): G independent grids (one shared grid, or one per discrete
channel), d dimensions, N bins each. A uniform point y in [0, 1)^d falls in bin i = floor(y N)
of every dimension and maps linearly inside that bin onto [edge_i, edge_{i+1}); the Jacobian is
prod_j N * width_ij. Training data are per-grid, per-dimension, per-bin sums of (w f)^2 and
sample counts: plain arrays that add across batches, so any number of workers can produce them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

from mainboard.integrators.chunking import row_slices

TINY = 10.0 ** (sys.float_info.min_10_exp + 50)
Fill = Callable[[np.random.Generator, np.ndarray, slice, np.ndarray], object]
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

    def map(self, y: np.ndarray, group: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Uniform y (d, n) -> points x (d, n), Jacobians (n,), bin numbers (d, n).

        Dimension-major layout: every per-dimension operation runs over contiguous memory, and
        the product of the d Jacobian factors is a fast reduction over the first axis. Works
        in fixed row slices (see :mod:`~mainboard.integrators.chunking`); ``y`` is untouched.
        """
        if y.size and not (y.min() >= 0.0 and y.max() < 1.0):  # table lookups do not check
            raise ValueError("map needs uniform numbers in [0, 1)")
        return self._run(y.shape[1], group, lambda part, sl, _: np.copyto(part, y[:, sl]))

    def draw(self, rng: np.random.Generator, n: int, group: np.ndarray | None = None,
             into: Fill | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Like :meth:`map` on uniform draws from ``rng``, drawn slice by slice (a (d, rows)
        block per slice) so no batch-sized uniform array is ever allocated. ``into(rng,
        part, slice, spare)`` replaces the plain draw (VEGAS+ moves draws into their
        strata): it writes y already times the bin count, in [0, N] (N itself is taken as
        the last bin), and may use the slice's (d, rows) float work array ``spare``."""
        if into is not None:
            return self._run(n, group, lambda part, sl, spare: into(rng, part, sl, spare),
                             scaled=True)
        return self._run(n, group, lambda part, sl, _: rng.random(out=part))

    def _run(self, n: int, group: np.ndarray | None,
             fill: Callable[[np.ndarray, slice, np.ndarray], object], scaled: bool = False
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The slice loop of map/draw: ``fill(y_part, slice, spare)`` writes a slice's
        uniforms (times the bin count when ``scaled``); ``spare`` is a work array it may
        use (overwritten next)."""
        d = self.dim
        x = np.empty((d, n))
        jac = np.empty(n)
        bins = np.empty((d, n), dtype=self.bin_dtype)
        slices = row_slices(n)
        scratch = _Scratch(d, slices[0].stop - slices[0].start, floats=4)
        for sl in slices:
            k, (y, whole, width, lower) = scratch.views(sl.stop - sl.start)
            fill(y, sl, whole)
            if not scaled:
                # y < 1 implies y N < N after IEEE rounding: floor(y N) is a valid bin number.
                np.multiply(y, self.bins, out=y)
            np.floor(y, out=whole)
            np.subtract(y, whole, out=y)  # y now holds the position inside the bin
            part_bins = bins[:, sl]
            np.copyto(part_bins, whole, casting="unsafe")
            # A scaled fill may round up to N (p ~ 1e-16): last bin, at its edge. Checked
            # first: a max over int16 costs a tenth of the elementwise minimum.
            if scaled and part_bins.max() >= self.bins:
                np.minimum(part_bins, self.bins - 1, out=part_bins)
            self._index(part_bins, None if group is None else group[sl], k)
            np.take(self.width, k, out=width, mode="clip")  # k is in range: no checks needed
            np.take(self.lower, k, out=lower, mode="clip")
            np.multiply(y, width, out=y)
            out = x[:, sl]
            np.add(lower, y, out=out)
            np.minimum(out, ONE_BELOW, out=out)
            np.multiply(width, self.bins, out=width)
            np.prod(width, axis=0, out=jac[sl])
        return x, jac, bins

    def training(self, bins: np.ndarray, group: np.ndarray | None, f2: np.ndarray,
                 mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Per-bin sums of f2 and sample counts, shape (G, d, N), from bins (d, n).

        ``mask`` (n,) drops samples (non-finite values) from both sums and counts. One pair
        of bincounts per dimension and slice (no batch-sized index or weight arrays), added in
        slice order, so the sums only depend on the batch.
        """
        groups, dim, nbins = self.groups, self.dim, self.bins
        span = groups * nbins  # one dimension of every group: index g * N + bin
        sums = np.zeros((dim, span))
        counts = np.zeros((dim, span), dtype=np.intp)
        slices = row_slices(bins.shape[1])
        scratch = _Scratch(dim, slices[0].stop - slices[0].start, floats=0)
        for sl in slices:
            b, f = bins[:, sl], f2[sl]
            g = group[sl] if group is not None and groups > 1 else None
            if mask is not None and not mask[sl].all():
                keep = mask[sl]
                b, f, g = b[:, keep], f[keep], None if g is None else g[keep]
            k, _ = scratch.views(b.shape[1])
            np.copyto(k, b)  # one cast to the index type bincount wants, not one per call
            if g is not None:
                k += g * nbins
            for j in range(dim):
                sums[j] += np.bincount(k[j], weights=f, minlength=span)
                counts[j] += np.bincount(k[j], minlength=span)
        shape = (dim, groups, nbins)  # back to the tables' (G, d, N) order
        return (np.ascontiguousarray(sums.reshape(shape).transpose(1, 0, 2)),
                np.ascontiguousarray(counts.reshape(shape).transpose(1, 0, 2), dtype=np.float64))

    def _index(self, bins: np.ndarray, group: np.ndarray | None, out: np.ndarray) -> None:
        """Flat (G, d, N) table indices of bins (d, rows) and groups (rows,) into ``out``."""
        np.add(bins, self.offsets, out=out)
        if group is not None and self.groups > 1:
            out += group * (self.dim * self.bins)


class _Scratch:
    """Slice-sized work arrays reused by every slice of one call (never shared across calls,
    so concurrent threads cannot trample each other)."""

    def __init__(self, dim: int, rows: int, floats: int) -> None:
        self.dim = dim
        self.index = np.empty(dim * rows, dtype=np.intp)
        self.floats = np.empty((floats, dim * rows))

    def views(self, rows: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """Contiguous (d, rows) views: the table-index array and the float arrays."""
        size, shape = self.dim * rows, (self.dim, rows)
        return self.index[:size].reshape(shape), [buf[:size].reshape(shape)
                                                  for buf in self.floats]


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
