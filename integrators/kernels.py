"""Compiled twins of numpy hot paths, used when they pay and numba is there.

Why: the VEGAS+ draw puts every sample in its stratum, a per-row corner that numpy can only
gather or repeat in extra passes over the batch; on the 8-d gaussian that cost VEGAS+ about
a fifth more than classic VEGAS. One compiled loop (:mod:`.stratified_kernel`) does the
whole draw in a single pass and is faster than the classic numpy path.

A kernel computes exactly its numpy twin's numbers (same operations, same order, no
fast-math), so which one ran is invisible in every result: a fleet may mix hosts with and
without numba, and a process may switch from one to the other mid-run, and stay
bit-identical. Loading numba and the cached machine code costs about 0.3 s once per
process, as much as numpy's extra passes over some 5 million rows; so a process draws its
first :data:`LOAD_AFTER_ROWS` stratified rows with numpy and loads the kernel only then
(rent until renting has cost what buying does: never more than twice the better choice,
and nothing for the short runs and small workers that never get there). Batches under
:data:`KERNEL_ROWS` rows always keep to numpy; ``MAINBOARD_KERNELS=0`` keeps every batch
there; :func:`preload` loads at once (benchmarks, long-lived workers).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from mainboard.integrators.chunking import row_slices
from mainboard.integrators.grid import GridTables
from mainboard.names import lazy

#: Batches of fewer rows keep to numpy.
KERNEL_ROWS = 16384
#: Stratified rows a process draws with numpy before it loads the kernel.
LOAD_AFTER_ROWS = 1 << 22
#: ``MAINBOARD_KERNELS=0`` keeps every batch on numpy (to compare, or to rule kernels out).
ENV = "MAINBOARD_KERNELS"

_LOCK = threading.Lock()
_LOADED: dict[str, Any] = {}
_DRAWN = {"stratified": 0}  # rows drawn with numpy so far, in this process


def stratified_kernel(rows: int) -> Callable[..., None] | None:
    """The compiled stratified draw for a batch of ``rows`` rows, or None: numpy then
    (the rows are counted towards loading the kernel)."""
    if rows < KERNEL_ROWS or os.environ.get(ENV, "1") == "0":
        return None
    with _LOCK:
        if "stratified" not in _LOADED:
            if _DRAWN["stratified"] < LOAD_AFTER_ROWS:
                _DRAWN["stratified"] += rows
                return None
            _LOADED["stratified"] = _import_kernel()
        return _LOADED["stratified"]


def preload() -> bool:
    """Load the kernels now (whatever has been drawn); whether they are there."""
    with _LOCK:
        if "stratified" not in _LOADED:
            _LOADED["stratified"] = _import_kernel()
        return _LOADED["stratified"] is not None


def _import_kernel() -> Callable[..., None] | None:
    try:  # numba is optional: the registry imports it here, once a process has drawn enough
        kernel: Callable[..., None] = lazy("numba.kernel")
    except Exception:  # no numba, or one whose llvmlite does not load: numpy does it
        return None
    return kernel


def stratified_draw(kernel: Callable[..., None], rng: np.random.Generator, n: int,
                    tables: GridTables, step: np.ndarray, corners: np.ndarray,
                    starts: np.ndarray, factors: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x (d, n), Jacobians with the stratum factor (n,), bins (d, n), factors (n,)) of a
    stratified batch: the uniforms drawn slice by slice exactly as the numpy path draws
    them, each slice mapped by ``kernel``. ``corners`` (d, runs), ``starts`` (runs + 1) and
    ``factors`` (runs,) describe the batch's runs of strata."""
    d = tables.dim
    x, jac, scale = np.empty((d, n)), np.empty(n), np.empty(n)
    bins = np.empty((d, n), dtype=tables.bin_dtype)
    slices = row_slices(n)
    buffer = np.empty(d * (slices[0].stop - slices[0].start))
    corners = np.ascontiguousarray(corners)
    for sl in slices:
        part = buffer[:d * (sl.stop - sl.start)].reshape(d, sl.stop - sl.start)
        rng.random(out=part)
        kernel(part, step, corners, starts, factors, tables.lower, tables.width,
               tables.bins, x, jac, bins, scale, sl.start)
    return x, jac, bins, scale
