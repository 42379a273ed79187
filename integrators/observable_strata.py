"""Stratified errors of the observables: what VEGAS+ strata do to their variance.

A stratified iteration (see :mod:`~mainboard.integrators.strata`) estimates a moment, or a
histogram bin's integral, by (1/N) sum_i g_i, with g = w f^k (a bin: w f on the rows in the
bin, 0 elsewhere) and w carrying the stratum factor N / (H n_h). Its variance is the
strata's, not the plain one (moment 1 gets the total's error this way):

    Var = (1/N^2) sum_h c_h (S2_h - S1_h^2 / n_h),   c_h = n_h / (n_h - 1),

S1_h and S2_h the sums of g and g^2 over stratum h's samples: unbiased whenever every
stratum has 2 samples or more (VEGAS+ allocates at least 2). Per bin it is noisy (an edge
cuts through strata of a few samples), so iterations are never weighted by it: it is
propagated through fixed weights (:mod:`~mainboard.integrators.observables`).

A stratum's samples are contiguous positions of the iteration, so a row slice (and a
batch) holds most of its strata whole and shares at most its first and last with its
neighbours. A slice reports per group (bin; one group for the moments) the sum of c_h g^2
(``csum2``), the sum over the strata it holds whole of S1_h^2 / (n_h - 1) (``sq``), and S1
per group of the strata it holds only part of (``split``, keyed by stratum): those add
across slices and batches, in order, before they are squared, so the result is as
bit-identical as the total.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def strata_terms(values: np.ndarray, keep: np.ndarray | None, stratum: np.ndarray,
                 counts: np.ndarray, group: np.ndarray | None = None, groups: int = 1
                 ) -> dict[str, Any]:
    """One slice's stratified terms of ``values`` (n, m) per group: ``keep`` the rows
    counted (None: all), ``stratum`` each row's stratum (ascending), ``counts`` samples per
    stratum in the iteration, ``group`` each row's group in [0, groups] (``groups``: left
    out, like a histogram's overflow slot; None: all in group 0)."""
    m = values.shape[1]
    out: dict[str, Any] = {"csum2": np.zeros((groups, m)), "sq": np.zeros((groups, m)),
                           "split": {}}
    first = int(stratum[0])
    local = stratum - first
    held = np.bincount(local)  # rows of each stratum in this slice (contiguous runs)
    mine = counts[first:first + held.size].astype(np.float64)
    whole = held == mine
    inverse = np.divide(1.0, mine - 1.0, out=np.zeros_like(mine), where=mine >= 2)
    c_row = np.repeat(mine * inverse, held)  # n_h / (n_h - 1), 0 below 2 samples
    if keep is not None:
        values = np.where(keep[:, None], values, 0.0)
    if group is None:
        group = np.zeros(stratum.size, dtype=np.int64)
    width = groups + 1  # the left-out slot too: its sums are dropped below
    cells, cell = _cells(local * width + group)  # the (stratum, group) pairs present
    cell_stratum, cell_group = np.divmod(cells, width)
    counted = whole[cell_stratum] & (cell_group < groups)
    scale = inverse[cell_stratum]
    parted = [(h, (cell_stratum == h) & (cell_group < groups)) for h in np.flatnonzero(~whole)]
    for h, _ in parted:  # at most the first and the last stratum
        out["split"][str(first + int(h))] = {"s1": np.zeros((groups, m)),
                                             "scale": float(inverse[h])}
    for c in range(m):
        col = values[:, c]
        out["csum2"][:, c] = np.bincount(group, weights=c_row * col * col,
                                         minlength=width)[:groups]
        s1 = np.bincount(cell, weights=col, minlength=cells.size)
        out["sq"][:, c] = np.bincount(cell_group[counted], weights=(scale * s1 * s1)[counted],
                                      minlength=width)[:groups]
        for h, mask in parted:
            out["split"][str(first + int(h))]["s1"][cell_group[mask], c] = s1[mask]
    return out


def _cells(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys, ascending, and each row's index among them, as
    ``np.unique(key, return_inverse=True)``; by a stable sort, fast here because the keys
    arrive nearly sorted (rows are in stratum order)."""
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    new = np.empty(key.size, dtype=bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    cell = np.empty(key.size, dtype=np.int64)
    cell[order] = np.cumsum(new) - 1
    return ordered[new], cell


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
