"""VEGAS+ adaptive stratified sampling (Lepage 2021) as array functions, owned by the sampler.

The uniform cube y in [0, 1)^d that the VEGAS map consumes is cut into ``prod(nstrat)``
hypercubes (strata). An iteration's N samples are shared out as counts n_h (at least 2 each):
the owner decides them before the iteration from the previous iteration's per-stratum
variances sigma_h^2 (of each stratum's contribution to the estimate), n_h ~ sigma_h^beta on
top of an even floor (``beta`` damps the redistribution; 0 keeps it even).

Why a plan instead of per-worker choices: the counts, stored in the sampler snapshot with the
iteration's batch sizes, say which stratum every sample position 0..N-1 of the iteration
belongs to (positions in stratum order). Batch b takes positions [sum(sizes[:b]), +sizes[b]),
so its share of the strata, like its random stream, depends on the snapshot and its own
coordinates only: bit-identical on any worker, exactly once under redelivery.

A sample in stratum h carries the weight factor N / (H n_h) (H strata of volume 1/H), so the
plain mean over the iteration is the stratified estimate sum_h V_h <J f>_h. Its variance is
not the plain one: every batch reports per-stratum sums (:class:`StrataSums`) over its
own span of strata, the merge adds them into full-length arrays (:func:`add_span`), and
:func:`stratified_variance` combines them.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

#: Share of an iteration's samples placed by variance; the rest is spread evenly (vegas'
#: ``neval_frac``).
ADAPTIVE_FRACTION = 0.75
#: At most this many strata: an iteration's merged statistics and learned weights have this
#: length.
MAX_STRATA = 2 ** 15
KEYS = ("strata_count", "strata_sum", "strata_sum2")
#: Batch results carry the three arrays over the batch's own strata only, and this key,
#: [first stratum, strata in the iteration]: the span form (a batch of an 8-d run sends a
#: quarter of the strata, not three mostly-zero full-length arrays).
SPAN = "strata_span"


def strata_shape(total: int, dim: int) -> np.ndarray:
    """Strata per axis for an iteration of ``total`` samples: as many hypercubes as leave
    about 2 evenly placed samples each out of the non-adaptive share, axes differing by at
    most one, capped at :data:`MAX_STRATA`."""
    target = min((1.0 - ADAPTIVE_FRACTION) * total / 2.0, float(MAX_STRATA))
    if dim == 0 or target < 2:
        return np.ones(dim, dtype=np.int64)
    # The largest ns with ns ** dim <= target, counted up from one below the float root
    # (which may round up past an integer).
    ns = max(1, int(target ** (1.0 / dim)) - 1)
    while (ns + 1) ** dim <= target:
        ns += 1
    # Axes grown one by one while the product stays within the target; growing all of them
    # would pass it ((ns + 1) ** dim > target), so one axis is the first too many.
    grown = next(j for j in range(dim) if (ns + 1) ** (j + 1) * ns ** (dim - j - 1) > target)
    shape = np.full(dim, ns, dtype=np.int64)
    shape[:grown] += 1
    return shape


def allocate(sigf: np.ndarray | None, total: int, strata: int) -> np.ndarray:
    """Samples per stratum, summing exactly to ``total``: an even floor (at least 2) plus the
    rest in proportion to ``sigf`` (None or all zero: evenly), rounded down, the few samples
    rounding leaves spread evenly over the strata (any allocation keeps the estimate
    unbiased; this one costs O(H), not a sort)."""
    floor = max(2, int((1.0 - ADAPTIVE_FRACTION) * total / strata))
    floor = min(floor, total // strata)
    rest = total - floor * strata
    if sigf is None or not np.any(sigf > 0):
        share = np.full(strata, rest / strata)
    else:
        share = sigf * (rest / sigf.sum())
    whole = np.floor(share)
    counts = whole.astype(np.int64) + floor
    left = total - int(counts.sum())
    if left > 0:  # fewer than one per stratum: 0 <= left < strata
        counts[np.arange(left) * strata // left] += 1
    return counts


def run_starts(counts: np.ndarray) -> np.ndarray:
    """First row of each run of a batch's share (``counts`` rows per stratum), then the
    end: what the fill, the compiled draw and the per-stratum sums walk."""
    starts = np.zeros(counts.size + 1, dtype=np.intp)
    np.cumsum(counts, out=starts[1:])
    return starts


@dataclass(frozen=True)
class StrataPlan:
    """One iteration's stratification: strata per axis, batch sizes and samples per stratum."""

    nstrat: np.ndarray
    sizes: tuple[int, ...]
    counts: np.ndarray

    @classmethod
    def build(cls, nstrat: np.ndarray, sizes: Sequence[int], sigf: np.ndarray | None
              ) -> StrataPlan:
        """The plan for batches ``sizes`` from the learned ``sigf`` (None: even)."""
        total = int(sum(sizes))
        return cls(nstrat, tuple(int(s) for s in sizes),
                   allocate(sigf, total, int(np.prod(nstrat))))

    @property
    def total(self) -> int:
        """Samples in the iteration."""
        return sum(self.sizes)

    @cached_property
    def starts(self) -> np.ndarray:
        """First position of each stratum, plus the end (length H + 1)."""
        return np.concatenate([[0], np.cumsum(self.counts)])

    def covers(self, batch_index: int, n: int) -> bool:
        """Whether the plan has batch ``batch_index`` with ``n`` samples."""
        return batch_index < len(self.sizes) and self.sizes[batch_index] == n

    def share(self, batch_index: int, n: int) -> tuple[int, np.ndarray]:
        """Batch ``batch_index``'s strata: (first stratum, samples in each of its strata)."""
        if not self.covers(batch_index, n):
            raise ValueError(f"batch {batch_index} of {n} samples is not in the sampler's "
                             f"plan (batch sizes {list(self.sizes)})")
        lo = sum(self.sizes[:batch_index])
        hi = lo + n
        first = int(np.searchsorted(self.starts, lo, side="right")) - 1
        last = int(np.searchsorted(self.starts, hi, side="left"))  # one past
        edges = np.clip(self.starts[first:last + 1], lo, hi)
        return first, np.diff(edges)

    @staticmethod
    def corners_of(nstrat: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """Lower corner of every stratum, (d, H) (row-major numbering), times ``scale``."""
        axes = [np.arange(int(k), dtype=np.float64) * (scale / int(k)) for k in nstrat]
        grids = np.meshgrid(*axes, indexing="ij")
        return np.stack([g.reshape(-1) for g in grids]) if grids else np.empty((0, 1))

    @cached_property
    def factors(self) -> np.ndarray:
        """Weight factor of a sample in each stratum, N / (H n_h)."""
        return self.total / (float(self.counts.size) * self.counts)

    def layout(self, batch_index: int, n: int) -> np.ndarray:
        """The stratum number of each sample of batch ``batch_index`` (n,), ascending."""
        return self.runs(*self.share(batch_index, n))

    @staticmethod
    def runs(first: int, local: np.ndarray) -> np.ndarray:
        """Stratum numbers of a share (see :meth:`share`), one run per stratum."""
        return np.repeat(np.arange(first, first + local.size, dtype=np.intp), local)


class StratifiedFill:
    """Fill callback for ``GridTables.draw``: uniform draws moved into each sample's stratum
    and scaled to bin units at once, N y = u N / nstrat + N corner, slice by slice in the
    grid's own work array (a batch-sized buffer would push the slice out of cache).

    A batch's samples come in runs, one per stratum (``counts``, in stratum order, numbered
    row-major from ``first``). An axis whose corner stays put over long stretches of rows
    (a slow axis: the first ones) gets its corner added as a constant over each stretch;
    the fast axes get theirs repeated over the slice's runs (one ``repeat`` of the runs'
    corners, no per-row stratum index). Either way every y is the same u * step + corner,
    so how the axes are split is a matter of speed, not of numbers."""

    #: An axis whose corner changes every fewer rows than this, on average, is repeated.
    BLOCK_ROWS = 512

    def __init__(self, corners: np.ndarray, nstrat: np.ndarray, step: np.ndarray,
                 first: int, counts: np.ndarray) -> None:
        self.step = step[:, None]
        n, dim = int(counts.sum()), nstrat.size
        stride = np.ones(dim, dtype=np.int64)
        stride[:-1] = np.cumprod(nstrat[::-1])[::-1][1:]
        per_row = counts.size / max(n, 1)  # strata per row, on average
        slow = 0
        while slow < dim and stride[slow] >= self.BLOCK_ROWS * per_row:
            slow += 1
        self.slow = slow
        self.fast = corners[slow:, first:first + counts.size]  # the batch's runs' corners
        self.starts = run_starts(counts)
        last = first + counts.size
        self.blocks: list[tuple[list[int], list[float]]] = []
        for j in range(slow):  # one stretch per change of the axis' corner
            heads = np.arange((first // stride[j] + 1) * stride[j], last, stride[j])
            at = np.concatenate(([first], heads))
            rows = self.starts[at - first].tolist() + [n]
            values = corners[j].take(at).tolist()
            self.blocks.append((rows, values))

    def __call__(self, rng: np.random.Generator, part: np.ndarray, sl: slice,
                 low: np.ndarray) -> None:
        del low  # no work array needed
        rng.random(out=part)
        part *= self.step
        lo, hi = sl.start, sl.stop
        for j, (rows, values) in enumerate(self.blocks):
            row = part[j]
            b = bisect.bisect_right(rows, lo) - 1
            while rows[b] < hi:
                row[max(rows[b], lo) - lo:min(rows[b + 1], hi) - lo] += values[b]
                b += 1
        if self.fast.shape[0]:
            a = int(self.starts.searchsorted(lo, side="right")) - 1  # run holding row lo
            b = int(self.starts.searchsorted(hi, side="left"))  # one past the last run
            edges = self.starts[a:b + 1].copy()
            edges[0], edges[-1] = lo, hi
            part[self.slow:] += np.repeat(self.fast[:, a:b], np.diff(edges), axis=1)


class StrataSums:
    """Per-stratum count, sum and sum of squares of one batch's weighted values w f, added
    slice by slice while evaluate still holds each slice in cache (the rows run through
    strata ``first, first + 1, ...`` in runs of ``counts`` rows: the plan's share).

    Each slice sums its part of every run with one ``add.reduceat`` (runs are contiguous:
    no per-row stratum index); a run cut by a slice edge gets its two parts added in slice
    order, so the sums depend on the batch alone. Non-finite rows count as absent: zeros in
    the sums, one less in the run's count. :meth:`result` is the span form (see
    :func:`add_span`)."""

    def __init__(self, first: int, counts: np.ndarray, strata: int, width: int) -> None:
        self.first, self.strata = first, strata
        self.starts = run_starts(counts)
        self.count = counts.astype(np.float64)
        self.sums, self.sums2 = np.zeros((width, counts.size)), np.zeros((width, counts.size))

    def add(self, lo: int, wf: np.ndarray, squares: np.ndarray | None,
            finite: np.ndarray | None) -> None:
        """Rows ``lo, lo + 1, ...`` of the batch: their w f (rows, m) and, for one column,
        their squares with non-finite rows zeroed (None: squared here); ``finite`` (None:
        all are) says which rows count."""
        rows = wf.shape[0]  # at least one: batches and their slices are never empty
        a = int(np.searchsorted(self.starts, lo, side="right")) - 1  # run holding row lo
        b = int(np.searchsorted(self.starts, lo + rows, side="left"))  # first run after
        heads = self.starts[a:b] - lo
        heads[0] = 0
        if finite is not None:  # zeros in the sums, one less in the count
            self.count[a:b] -= np.add.reduceat((~finite).astype(np.float64), heads)
            wf = np.where(finite[:, None], wf, 0.0)
        for c in range(wf.shape[1]):
            col = wf[:, c]
            self.sums[c, a:b] += np.add.reduceat(col, heads)
            square = np.square(col) if squares is None else squares
            self.sums2[c, a:b] += np.add.reduceat(square, heads)

    def result(self) -> dict[str, np.ndarray]:
        """The batch's statistics in span form."""
        return {SPAN: np.array([self.first, self.strata], dtype=np.float64),
                "strata_count": self.count, "strata_sum": self.sums, "strata_sum2": self.sums2}


def add_span(out: dict[str, np.ndarray], part: Mapping[str, np.ndarray]) -> None:
    """Add one batch's span-form statistics into the full-length (H,) / (m, H) arrays of
    ``out`` (created as zeros on first use). The merged form has no ``strata_span``: it is
    what :func:`combine` reads, what samplers ingest and what snapshots hold. Batch results
    written before the span form carry full-length arrays and simply add (see
    ``merge_training``)."""
    first, strata = (int(v) for v in np.asarray(part[SPAN]))
    for key in KEYS:
        arr = np.asarray(part[key], dtype=np.float64)
        full = out.get(key)
        if full is None:  # one iteration's batches share its plan: one strata count
            full = out[key] = np.zeros((*arr.shape[:-1], strata))
        full[..., first:first + arr.shape[-1]] += arr


def combine(training: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Merged batch statistics -> (samples per stratum (H,), each stratum's term of the
    variance of the mean (m, H)): n_h / (n_h - 1) M2_h / N^2 with M2_h = sum2 - sum^2 / n_h
    (the vegas package's per-hypercube variance), zero below 2 samples."""
    n = training["strata_count"]
    m2 = training["strata_sum2"] - np.divide(
        training["strata_sum"] ** 2, n, out=np.zeros_like(training["strata_sum"]),
        where=n > 0)
    np.maximum(m2, 0.0, out=m2)  # a near-constant stratum may round below zero
    total = n.sum()
    ok = n >= 2
    scale = np.divide(n, (n - 1.0) * total * total, out=np.zeros_like(n), where=ok)
    return n, m2 * scale


def stratified_variance(training: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Variance of the iteration's mean per component, or None without strata data."""
    if "strata_count" not in training or training["strata_count"].sum() < 2:
        return None
    return combine(training)[1].sum(axis=1)


def learn(training: Mapping[str, np.ndarray], beta: float) -> np.ndarray | None:
    """Next iteration's allocation weights sigma_h^beta (summed over components), or None
    (even) when the integrand looked constant; ``training`` holds strata data."""
    sigf = combine(training)[1].sum(axis=0) ** (beta / 2.0)
    return sigf if np.any(sigf > 0) else None
