"""Stratified errors of the moments: what VEGAS+ strata do to their variance.

A stratified iteration (see :mod:`~mainboard.integrators.strata`) estimates a moment by
(1/N) sum_i w_i f_i^k, with w carrying the stratum factor N / (H n_h). Its variance is the
strata's, not the plain one (moment 1 gets the total's error this way):

    Var = (1/N^2) sum_h c_h (S2_h - S1_h^2 / n_h),   c_h = n_h / (n_h - 1),

S1_h and S2_h the sums of w f^k and (w f^k)^2 over stratum h's samples. A stratum's samples
are contiguous positions of the iteration, so a row slice (and a batch) holds most of its
strata whole and shares at most its first and last with its neighbours. A slice reports the
sum of c_h (w f^k)^2 (``csum2``), the sum over the strata it holds whole of
S1_h^2 / (n_h - 1) (``sq``), and S1 of the strata it holds only part of (``split``, keyed by
stratum): those add across slices and batches, in order, before they are squared, so the
result is as bit-identical as the total.

Histogram bins keep the plain variance: a bin edge cuts through a few strata of 2 to 8
samples each, whose within-stratum variance of the bin's indicator is unbiased but so noisy
(often 0) that the weighted average over iterations would trust the wrong ones; the plain
variance is larger (conservative) and steady.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def strata_terms(values: np.ndarray, keep: np.ndarray | None, stratum: np.ndarray,
                 counts: np.ndarray) -> dict[str, Any]:
    """One slice's stratified terms of ``values`` (n, m): ``keep`` the rows counted (None:
    all), ``stratum`` each row's stratum (ascending), ``counts`` samples per stratum in the
    iteration."""
    m = values.shape[1]
    out: dict[str, Any] = {"csum2": np.zeros(m), "sq": np.zeros(m), "split": {}}
    if stratum.size == 0:
        return out
    first = int(stratum[0])
    local = stratum - first
    held = np.bincount(local)  # rows of each stratum in this slice (contiguous runs)
    mine = counts[first:first + held.size].astype(np.float64)
    whole = held == mine
    inverse = np.divide(1.0, mine - 1.0, out=np.zeros_like(mine), where=mine >= 2)
    c_row = np.repeat(mine * inverse, held)  # n_h / (n_h - 1), 0 below 2 samples
    if keep is not None:
        values = np.where(keep[:, None], values, 0.0)
    for c in range(m):
        col = values[:, c]
        out["csum2"][c] = (c_row * col * col).sum()  # numpy's sums, never BLAS: same bits
        s1 = np.bincount(local, weights=col, minlength=held.size)
        out["sq"][c] = (inverse[whole] * s1[whole] ** 2).sum()
        for h in np.flatnonzero(~whole):  # at most the first and the last stratum
            part = out["split"].setdefault(str(first + int(h)), {
                "s1": np.zeros(m), "scale": float(inverse[h])})
            part["s1"][c] = s1[h]
    return out


def merge_split(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Split strata of two consecutive pieces: the same stratum's sums add, ``a`` first."""
    out = {k: dict(v) for k, v in a.items()}
    for key, part in b.items():
        if key in out:
            out[key]["s1"] = out[key]["s1"] + part["s1"]
        else:
            out[key] = dict(part)
    return out


def strata_numerator(part: Mapping[str, Any]) -> np.ndarray:
    """N^2 times the stratified variance of each entry, from an iteration's merged terms."""
    num = np.asarray(part["csum2"]) - np.asarray(part["sq"])
    for split in part["split"].values():
        num = num - split["scale"] * np.asarray(split["s1"]) ** 2
    return np.maximum(num, 0.0)  # split strata's cancellation may round below zero


def split_from_plain(data: Mapping[str, Any]) -> dict[str, Any]:
    """Split strata as they arrive (codec arrays or JSON lists) back to numpy."""
    return {k: {"s1": np.asarray(v["s1"], dtype=np.float64), "scale": float(v["scale"])}
            for k, v in data.items()}
