"""Accumulation: per-batch partial results, their merge, and the run's weighted average.

A batch reduces its n values w*f to a :class:`Partial` (finite count, mean, sum of squared
deviations per real component). Partials merge with Chan's pairwise update; merging in
batch-index order makes an iteration's numbers bit-identical whoever computed the batches.
Non-finite values (NaN, inf) are counted, never averaged: the mean is over finite samples and
``nonfinite`` is reported with every result.

Iterations combine like vegas' ``RAvg``: inverse-variance weighting, chi2 = sum (m_k - m)^2 /
var_k with K - 1 degrees of freedom, and Q = gammaQ(dof/2, chi2/2).

Value kinds: ``scalar`` (1 column), ``complex`` (2 columns: real, imag) and ``vector`` (m).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mainboard.integrators.grid import TINY
from mainboard.integrators.observables import fold
from mainboard.integrators.special import gammaq


def real_columns(values: np.ndarray) -> np.ndarray:
    """Integrand values as (n, m) float64: complex -> (real, imag), scalar -> one column."""
    if np.iscomplexobj(values):
        return np.stack([values.real, values.imag], axis=1)
    return values[:, None] if values.ndim == 1 else values


@dataclass
class Partial:
    """Mergeable summary of weighted values: counts, mean and M2 (sum of squared deviations)."""

    samples: int
    count: int
    mean: np.ndarray
    m2: np.ndarray
    nonfinite: int = 0

    @classmethod
    def empty(cls, width: int) -> Partial:
        """The identity of :meth:`merge`."""
        return cls(0, 0, np.zeros(width), np.zeros(width), 0)

    @classmethod
    def from_values(cls, wf: np.ndarray) -> tuple[Partial, np.ndarray | None]:
        """Summarise (n, m) weighted values; also returns the finite-row mask (None if all)."""
        n = wf.shape[0]
        finite: np.ndarray | None = None
        with np.errstate(over="ignore", invalid="ignore"):
            total = wf.sum()
        if not np.isfinite(total):
            finite = np.isfinite(wf).all(axis=1)
            if finite.all():
                finite = None
        used = wf if finite is None else wf[finite]
        count = used.shape[0]
        if count == 0:
            return cls(n, 0, np.zeros(wf.shape[1]), np.zeros(wf.shape[1]), n), finite
        mean = used.sum(axis=0) / count
        dev = used - mean
        dev *= dev
        m2 = dev.sum(axis=0)
        return cls(n, count, mean, m2, n - count), finite

    def merge(self, other: Partial) -> Partial:
        """Chan et al.'s parallel update; exact for sums, stable for the variance."""
        count = self.count + other.count
        if other.count == 0 or self.count == 0:
            src = self if other.count == 0 else other
            mean, m2 = src.mean.copy(), src.m2.copy()
        else:
            delta = other.mean - self.mean
            mean = self.mean + delta * (other.count / count)
            m2 = self.m2 + other.m2 + delta * delta * (self.count * other.count / count)
        return Partial(self.samples + other.samples, count, mean, m2,
                       self.nonfinite + other.nonfinite)

    def variance_of_mean(self) -> np.ndarray:
        """Unbiased variance of the mean per component (inf when fewer than 2 samples)."""
        if self.count < 2:
            return np.full(self.mean.shape, np.inf)
        return self.m2 / (self.count - 1) / self.count

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"samples": self.samples, "count": self.count, "mean": self.mean,
                "m2": self.m2, "nonfinite": self.nonfinite}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Partial:
        """Inverse of :meth:`to_dict` (lists accepted)."""
        return cls(int(data["samples"]), int(data["count"]),
                   np.asarray(data["mean"], dtype=np.float64),
                   np.asarray(data["m2"], dtype=np.float64), int(data["nonfinite"]))


@dataclass(frozen=True)
class IterationEstimate:
    """One iteration's mean and variance of the mean per real component."""

    iteration: int
    mean: np.ndarray
    var: np.ndarray
    samples: int
    nonfinite: int

    @classmethod
    def from_partial(cls, iteration: int, partial: Partial) -> IterationEstimate:
        """Estimate from a fully merged iteration."""
        return cls(iteration, partial.mean.copy(), partial.variance_of_mean(), partial.samples,
                   partial.nonfinite)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-safe lists; inf variance kept as the string 'inf')."""
        return {"iteration": self.iteration, "mean": self.mean.tolist(),
                "var": [v if math.isfinite(v) else "inf" for v in self.var.tolist()],
                "samples": self.samples, "nonfinite": self.nonfinite}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IterationEstimate:
        """Inverse of :meth:`to_dict`."""
        return cls(int(data["iteration"]), np.asarray(data["mean"], dtype=np.float64),
                   np.asarray([float(v) for v in data["var"]], dtype=np.float64),
                   int(data["samples"]), int(data["nonfinite"]))


@dataclass(frozen=True)
class Combined:
    """Weighted average over iterations, per component and overall."""

    mean: np.ndarray
    error: np.ndarray
    chi2: np.ndarray
    dof: int
    q: np.ndarray
    chi2_total: float
    dof_total: int
    q_total: float

    @property
    def chi2_dof(self) -> float | None:
        """chi2 per degree of freedom over all components; None with a single kept iteration,
        where it is undefined (vegas says 0, which reads as a perfect fit)."""
        return self.chi2_total / self.dof_total if self.dof_total > 0 else None


def _q(dof: int, chi2: float) -> float:
    return gammaq(dof / 2.0, chi2 / 2.0) if dof > 0 and chi2 >= 0 else math.nan


def combine(estimates: Sequence[IterationEstimate]) -> Combined:
    """Inverse-variance weighted average with chi2 and Q, as vegas.RAvg(weighted=True)."""
    if not estimates:
        raise ValueError("no iterations to combine")
    means = np.stack([e.mean for e in estimates])
    var = np.stack([e.var for e in estimates])
    w = 1.0 / np.maximum(var, TINY)
    wsum = w.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        cvar = 1.0 / wsum
        mean = (w * means).sum(axis=0) * cvar
    used = w > 0
    chi2 = np.where(used, (means - mean) ** 2 * w, 0.0).sum(axis=0)
    kept = used.sum(axis=0)
    dof = int(kept.min()) - 1
    q = np.array([_q(int(k) - 1, float(c)) for k, c in zip(kept, chi2, strict=True)])
    dof_total = int((kept - 1).clip(min=0).sum())
    chi2_total = float(chi2.sum())
    return Combined(mean, np.sqrt(cvar), chi2, max(dof, 0), q, chi2_total, dof_total,
                    _q(dof_total, chi2_total))


@dataclass
class RunAccumulator:
    """All iteration estimates of a run; ``discard`` leaves the first ones out of the result.

    ``observables`` holds, when the run asks for histograms or moments, their running totals
    over the kept iterations (plain data of O(bins), see
    :func:`~mainboard.integrators.observables.fold`).
    """

    kind: str
    width: int
    discard: int = 0
    iterations: list[IterationEstimate] = field(default_factory=list)
    observables: dict[str, Any] | None = None

    def add(self, estimate: IterationEstimate, observables: dict[str, Any] | None = None
            ) -> None:
        """Record one finished iteration (and its observables' estimates, if any)."""
        if estimate.mean.shape != (self.width,):
            raise ValueError(f"iteration has {estimate.mean.shape} components, "
                             f"accumulator expects ({self.width},)")
        self.iterations.append(estimate)
        if observables is not None:
            self.observables = fold(self.observables, observables,
                                    keep=len(self.iterations) > self.discard)

    @property
    def samples(self) -> int:
        """All samples drawn, discarded iterations included."""
        return sum(e.samples for e in self.iterations)

    @property
    def nonfinite(self) -> int:
        """All non-finite values seen, discarded iterations included."""
        return sum(e.nonfinite for e in self.iterations)

    def kept(self) -> list[IterationEstimate]:
        """Iterations in the result: after ``discard``, or the last one if none remain."""
        kept = self.iterations[self.discard:]
        return kept or self.iterations[-1:]

    def result(self) -> Combined:
        """The weighted average of the kept iterations."""
        return combine(self.kept())

    def snapshot(self) -> dict[str, Any]:
        """Plain (JSON-safe) data; ``observables`` only when the run has some."""
        out = {"kind": self.kind, "width": self.width, "discard": self.discard,
               "iterations": [e.to_dict() for e in self.iterations]}
        if self.observables is not None:
            out["observables"] = self.observables
        return out

    @classmethod
    def restore(cls, data: Mapping[str, Any]) -> RunAccumulator:
        """Inverse of :meth:`snapshot`."""
        return cls(str(data["kind"]), int(data["width"]), int(data["discard"]),
                   [IterationEstimate.from_dict(e) for e in data["iterations"]],
                   data.get("observables"))
