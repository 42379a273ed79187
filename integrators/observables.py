"""Observables beyond the total: histograms of a function of the point, moments of f.

Each batch reduces to plain sums (:class:`Sums`): per histogram bin the weighted values
sum(w f), their squares sum((w f)^2) and the hit count; per moment order k, sum(w f^k) and
sum((w f^k)^2), all per real component and over the batch's finite rows only (the rows the
total counts); under VEGAS+ stratification also the strata's terms of each
(:mod:`~mainboard.integrators.observable_strata`). Sums add element-wise in batch-index
order (and inside a batch in row-slice order), so an iteration's sums are bit-identical
whoever computed the batches, like the total's
:class:`~mainboard.integrators.accumulators.Partial`.

An iteration's N finite samples give each bin (and moment) the estimate m = S1/N (its share
of the integral) with the variance of that mean: the strata's when stratified, else
(S2/N - (S1/N)^2)/(N-1). Iterations combine with weights the data do not choose, w_k = N_k
(equal for equal iterations): the mean sum w_k m_k / sum w_k is then unbiased and its
variance sum w_k^2 var_k / (sum w_k)^2 is propagated through those weights. Weighting by
estimated variances (a bin's own, or the total's as ``RAvg`` does) is not: a bin's variance
comes from the few strata its edges cut (noisy, often near 0) and the total's correlates
with the bins near the integrand's peak, and either weight then leans towards iterations
whose bins came out low (measured with VEGAS+ on x^2: the top bin's pulls averaged -0.9 with
the total's weights, 0 with these). Drop the unadapted first iterations with ``discard``,
as for the total. The running sums (:func:`fold`) keep a snapshot O(bins) however long the
run; a bin never hit reads 0 +- 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mainboard.errors import BatchError
from mainboard.integrators.observable_strata import (
    merge_split,
    split_from_plain,
    strata_numerator,
    strata_terms,
)
from mainboard.integrators.projection import component_labels
from mainboard.integrators.spec import RunSpec, parse_run

Sums = dict[str, Any]  # {"histograms": {name: {"sum", "sum2", "hits"}}, "moments": {...}}
Observable = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Histogram:
    """One histogram of a run: its spec, its observable and its bin edges."""

    name: str
    of: str
    fn: Observable
    edges: np.ndarray

    @property
    def bins(self) -> int:
        """Number of bins."""
        return self.edges.size - 1

    def bin_index(self, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Each point's bin (``bins``, one past the last: outside the range, or a non-finite
        observable; a slot bincount fills and the sums leave out)."""
        value = np.asarray(self.fn(x, idx), dtype=np.float64)
        if value.shape != (x.shape[0],):
            raise BatchError("evaluate", f"histogram {self.name!r}: {self.of} returned shape "
                             f"{value.shape}, expected ({x.shape[0]},)")
        return _locate(self.edges, value)


def _locate(edges: np.ndarray, value: np.ndarray) -> np.ndarray:
    """The bin of each value among equal bins (``bins`` outside, or non-finite): what
    ``searchsorted(edges, value, "right") - 1`` gives, in O(n) instead of O(n log bins)."""
    bins = edges.size - 1
    low, high = edges[0], edges[-1]
    with np.errstate(invalid="ignore"):
        inside = (value >= low) & (value <= high)  # False for NaN
    where = np.full(value.shape, bins, dtype=np.int64)
    v = value[inside]
    guess = np.minimum(((v - low) * (bins / (high - low))).astype(np.int64), bins - 1)
    guess -= v < edges[guess]  # rounding put it one bin high
    guess += (v >= edges[guess + 1]) & (guess < bins - 1)  # or one bin low
    where[inside] = guess
    return where


def _coordinate(axis: str, index: int) -> Observable:
    if axis == "x":
        return lambda x, idx: x[:, index]
    return lambda x, idx: idx[:, index].astype(np.float64)


def _target(fn: Callable[..., Any], discrete: bool) -> Observable:
    if discrete:
        return lambda x, idx: fn(x, idx)
    return lambda x, idx: fn(x)


@dataclass(frozen=True)
class Observables:
    """A run's histograms and moment orders; ``width`` real components per value."""

    histograms: tuple[Histogram, ...]
    moments: int
    width: int

    @classmethod
    def build(cls, spec: Any, width: int, discrete: bool,
              load: Callable[[str, str], Callable[..., Any]]) -> Observables | None:
        """From ``[accumulator]`` (None when it asks for nothing); ``load(target, key)``
        imports a ``module:function`` observable."""
        if not spec.histograms and not spec.moments:
            return None
        made = []
        for i, h in enumerate(spec.histograms):
            where = h.coordinate
            fn = (_coordinate(*where) if where is not None
                  else _target(load(h.of, f"accumulator.histograms[{i}].of"), discrete))
            made.append(Histogram(h.name, h.of, fn, np.linspace(h.range[0], h.range[1],
                                                                  h.bins + 1)))
        return cls(tuple(made), int(spec.moments), width)

    def bins(self, x: np.ndarray, idx: np.ndarray) -> list[np.ndarray]:
        """Each histogram's bin per point of a batch (computed once per batch)."""
        return [h.bin_index(x, idx) for h in self.histograms]

    def reduce(self, f: np.ndarray, weights: np.ndarray, bins: Sequence[np.ndarray],
               finite: np.ndarray | None,
               strata: tuple[np.ndarray, np.ndarray] | None = None) -> Sums:
        """One row slice: ``f`` (n, width) real values, ``weights`` (n,), ``bins`` this
        slice's bin per point, ``finite`` the rows the total counts (None: all rows);
        ``strata`` (each row's stratum, samples per stratum) when the batch is stratified:
        the bins' and moments' errors are then the strata's
        (:mod:`~mainboard.integrators.observable_strata`)."""
        with np.errstate(invalid="ignore", over="ignore"):  # non-finite rows: out of the sums
            wf = f * weights[:, None]
            square = wf * wf
        out: Sums = {"histograms": {}}
        for h, at in zip(self.histograms, bins, strict=True):
            if finite is not None:  # rows the total leaves out go to the overflow slot too
                at = np.where(finite, at, h.bins)
            terms = {} if strata is None else strata_terms(wf, None, *strata, at, h.bins)
            out["histograms"][h.name] = {
                "sum": _per_bin(at, wf, h.bins), "sum2": _per_bin(at, square, h.bins),
                "hits": np.bincount(at, minlength=h.bins + 1)[:h.bins].astype(np.int64),
                **terms}
        if self.moments:
            out["moments"] = self._moments(f, wf, finite, strata)
        return out

    def _moments(self, f: np.ndarray, wf: np.ndarray, finite: np.ndarray | None,
                 strata: tuple[np.ndarray, np.ndarray] | None) -> dict[str, Any]:
        """Sums of w f^k and (w f^k)^2 for k = 1..K over the finite rows, and the strata's
        terms of the K orders side by side when stratified."""
        powers = [wf]
        with np.errstate(invalid="ignore", over="ignore"):
            for _ in range(1, self.moments):  # w f^(k+1), one product per order
                powers.append(powers[-1] * f)
        terms = {} if strata is None else strata_terms(np.concatenate(powers, axis=1),
                                                       finite, *strata)
        if finite is not None:
            powers = [p[finite] for p in powers]
        return {"sum": np.stack([p.sum(axis=0) for p in powers]),
                "sum2": np.stack([np.einsum("ij,ij->j", p, p) for p in powers]), **terms}

    def empty(self) -> Sums:
        """The identity of :func:`add`."""
        out: Sums = {"histograms": {h.name: {"sum": np.zeros((h.bins, self.width)),
                                             "sum2": np.zeros((h.bins, self.width)),
                                             "hits": np.zeros(h.bins, dtype=np.int64)}
                                    for h in self.histograms}}
        if self.moments:
            shape = (self.moments, self.width)
            out["moments"] = {"sum": np.zeros(shape), "sum2": np.zeros(shape)}
        return out


def _per_bin(at: np.ndarray, rows: np.ndarray, bins: int) -> np.ndarray:
    """(bins, width) sums of ``rows`` by bin (``at == bins``: left out); np.bincount adds
    in row order."""
    return np.stack([np.bincount(at, weights=rows[:, c], minlength=bins + 1)[:bins]
                     for c in range(rows.shape[1])], axis=1)


def _add_part(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        if key not in a:
            out[key] = value
        elif key == "split":
            out[key] = merge_split(a[key], value)
        else:
            out[key] = a[key] + value
    return out


def add(a: Sums, b: Sums) -> Sums:
    """Element-wise sum of two batches' (or slices') sums, ``a`` first (split strata's
    sums joined by stratum)."""
    out: Sums = {"histograms": {name: _add_part(a["histograms"][name], part)
                                for name, part in b["histograms"].items()}}
    if "moments" in b:
        out["moments"] = _add_part(a["moments"], b["moments"])
    return out


def from_plain(data: Mapping[str, Any]) -> Sums:
    """Sums as they arrive (codec arrays or JSON lists) back to numpy arrays."""
    def arrays(part: Mapping[str, Any]) -> dict[str, Any]:
        return {k: split_from_plain(v) if k == "split"
                else np.asarray(v, dtype=np.int64 if k == "hits" else np.float64)
                for k, v in part.items()}

    out: Sums = {"histograms": {n: arrays(p) for n, p in data["histograms"].items()}}
    if data.get("moments") is not None:
        out["moments"] = arrays(data["moments"])
    return out


def _estimate(part: Mapping[str, Any], count: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean S1/N and variance of the mean per entry (inf with fewer than 2 samples); the
    strata's variance when the iteration was stratified."""
    s1, s2 = part["sum"], part["sum2"]
    if count < 2:
        return np.zeros_like(s1), np.full(s1.shape, np.inf)
    mean = s1 / count
    if "csum2" in part:
        return mean, strata_numerator(part).reshape(mean.shape) / (float(count) * count)
    var = np.maximum(s2 / count - mean * mean, 0.0) / (count - 1)
    return mean, var


def _plain(values: np.ndarray) -> list[Any]:
    """Floats as JSON keeps them: inf as the string 'inf' (as IterationEstimate stores it)."""
    return [v if math.isfinite(v) else "inf" for v in values.reshape(-1).tolist()]


def _floats(values: Sequence[Any]) -> np.ndarray:
    return np.asarray([float(v) for v in values], dtype=np.float64)


def iteration_estimates(sums: Sums, count: int) -> dict[str, Any]:
    """One iteration's per-bin and per-order means and variances of the mean (``count``
    finite samples), as plain data, with the iteration's weight (``count``: fixed by the
    plan, never by the data)."""
    out: dict[str, Any] = {"weight": float(count), "histograms": {}}
    for name, part in sums["histograms"].items():
        mean, var = _estimate(part, count)
        out["histograms"][name] = {"mean": _plain(mean), "var": _plain(var),
                                   "hits": part["hits"].tolist()}
    if "moments" in sums:
        mean, var = _estimate(sums["moments"], count)
        out["moments"] = {"mean": _plain(mean), "var": _plain(var)}
    return out


def _fold_one(total: Mapping[str, Any] | None, entry: Mapping[str, Any], weight: float
              ) -> dict[str, Any]:
    """Add one iteration's entry, weighted by ``weight``, to the running sums of w m and
    w^2 var per entry."""
    mean, var = _floats(entry["mean"]), _floats(entry["var"])
    sum_wm = weight * mean
    sum_wwv = weight * weight * var if weight > 0 else np.zeros_like(var)  # no 0 * inf
    if total is not None:
        sum_wm = _floats(total["sum_wm"]) + sum_wm
        sum_wwv = _floats(total["sum_wwv"]) + sum_wwv
    out = {"sum_wm": sum_wm.tolist(), "sum_wwv": _plain(sum_wwv)}
    if "hits" in entry:
        hits = np.asarray(entry["hits"], dtype=np.int64)
        out["hits"] = (hits if total is None else hits + np.asarray(total["hits"])).tolist()
    return out


def fold(totals: Mapping[str, Any] | None, entry: Mapping[str, Any], keep: bool
         ) -> dict[str, Any]:
    """The run's observable totals after one more iteration (``keep``: past ``discard``).

    Plain data of O(bins), whatever the number of iterations, stored in every snapshot:
    over the kept iterations the running sum of their weights and, per entry, of w m and
    w^2 var; and the last iteration's entry (the result while every iteration so far is
    discarded).
    """
    kept = int(totals["kept"]) if totals else 0
    if not keep:
        return {**(dict(totals) if totals else {"kept": 0}), "last": dict(entry)}
    prev = totals if totals and kept else None
    weight = float(entry["weight"])
    sum_w = weight if prev is None else float(prev["sum_w"]) + weight
    out: dict[str, Any] = {"kept": kept + 1, "last": dict(entry), "sum_w": sum_w,
                           "histograms": {
        name: _fold_one(prev["histograms"][name] if prev else None, part, weight)
        for name, part in entry["histograms"].items()}}
    if "moments" in entry:
        out["moments"] = _fold_one(prev["moments"] if prev else None, entry["moments"],
                                   weight)
    return out


def _result(total: Mapping[str, Any], sum_w: float, shape: tuple[int, int]
            ) -> tuple[np.ndarray, np.ndarray]:
    """Mean and error per entry (``shape``: rows, components); 0 +- 0 without samples."""
    if sum_w <= 0:
        return np.zeros(shape), np.zeros(shape)
    mean = _floats(total["sum_wm"]) / sum_w
    error = np.sqrt(_floats(total["sum_wwv"])) / sum_w
    return mean.reshape(shape), error.reshape(shape)


def combine_observables(specs: Any, totals: Mapping[str, Any], width: int,
                        labels: Sequence[str]) -> dict[str, Any]:
    """The run's histograms and moments from its totals (:func:`fold`).

    ``specs`` is ``[accumulator]``; values are per component (``labels``): ``estimate[c][b]``
    is bin b of component c.
    """
    if not totals.get("kept"):  # every iteration so far discarded: the last one alone
        totals = fold(None, totals["last"], keep=True)
    sum_w = float(totals["sum_w"])
    out: dict[str, Any] = {"components": list(labels), "histograms": []}
    for h in specs.histograms:
        total = totals["histograms"][h.name]
        mean, error = _result(total, sum_w, (h.bins, width))
        out["histograms"].append({
            "name": h.name, "of": h.of, "bins": h.bins, "range": list(h.range),
            "edges": np.linspace(h.range[0], h.range[1], h.bins + 1).tolist(),
            "estimate": mean.T.tolist(), "error": error.T.tolist(), "hits": total["hits"]})
    if specs.moments:
        mean, error = _result(totals["moments"], sum_w, (specs.moments, width))
        out["moments"] = {"orders": list(range(1, specs.moments + 1)),
                          "estimate": mean.T.tolist(), "error": error.T.tolist()}
    return out


def run_observables(spec: Any, totals: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A run's observables from its spec (a RunSpec or its dict) and the totals its
    accumulator keeps (``RunAccumulator.observables``, in every snapshot); None when the
    run has none or no iteration yet."""
    if not isinstance(spec, RunSpec):
        spec = parse_run(dict(spec))
    if not totals or (not spec.accumulator.histograms and not spec.accumulator.moments):
        return None
    labels = component_labels(spec.integrand)  # one per real component
    return combine_observables(spec.accumulator, totals, len(labels), labels)
