"""Fixed points for ``plot_line`` and ``image`` tasks, and the integrand's values there.

Why pure and here: a worker computes the points of its own rows from the task's geometry
(the message carries only the geometry and a row range), so the values depend on nothing
but the geometry, the transforms and the integrand: the same on any worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mainboard.integrators.accumulators import real_columns
from mainboard.integrators.domain import Batch
from mainboard.integrators.stages import Run, scope


def _linspace(spec: Mapping[str, Any]) -> np.ndarray:
    count = int(spec["count"])
    if count == 1:
        return np.array([float(spec["start"])])
    return np.linspace(float(spec["start"]), float(spec["stop"]), count)


def point_count(kind: str, geometry: Mapping[str, Any]) -> int:
    """How many points the task evaluates."""
    if kind == "plot_line":
        return int(geometry["linspace"]["count"])
    return int(geometry["u_linspace"]["count"]) * int(geometry["v_linspace"]["count"])


def coordinates(kind: str, geometry: Mapping[str, Any], lo: int, hi: int) -> np.ndarray:
    """The raster coordinates of rows [lo, hi): t (n, 1) on a line, (u, v) (n, 2) on a
    plane (v outer, u inner: row r is u index r % nu, v index r // nu)."""
    rows = np.arange(lo, hi)
    if kind == "plot_line":
        return _linspace(geometry["linspace"])[rows][:, None]
    u, v = _linspace(geometry["u_linspace"]), _linspace(geometry["v_linspace"])
    return np.stack([u[rows % u.size], v[rows // u.size]], axis=1)


def points(kind: str, geometry: Mapping[str, Any], lo: int, hi: int) -> np.ndarray:
    """x = offset + t direction (a line), offset + u u_vector + v v_vector (a plane)."""
    c = coordinates(kind, geometry, lo, hi)
    x = np.broadcast_to(np.asarray(geometry["offset"], dtype=np.float64),
                        (c.shape[0], len(geometry["offset"]))).copy()
    axes = ["direction"] if kind == "plot_line" else ["u_vector", "v_vector"]
    for j, axis in enumerate(axes):
        x += c[:, j:j + 1] * np.asarray(geometry[axis], dtype=np.float64)[None, :]
    return x


def values(run: Run, kind: str, geometry: Mapping[str, Any], lo: int, hi: int) -> np.ndarray:
    """The integrand through the run's transforms at rows [lo, hi), times the transforms'
    Jacobian (the integrand as the sampler sees it): (n, m) real columns (complex:
    real, imag)."""
    x = points(kind, geometry, lo, hi)
    n = x.shape[0]
    discrete = list(geometry.get("discrete") or [0] * len(run.domain.discrete))
    idx = np.broadcast_to(np.asarray(discrete, dtype=np.int64), (n, len(discrete))).copy()
    batch = Batch(x=x, idx=idx, weights=np.ones(n))
    with scope(run):
        if run.spec.transforms:
            batch = run.transforms.apply(batch)
        f = run.integrand.evaluate(batch.x, batch.idx)
    return real_columns(np.asarray(f)) * batch.weights[:, None]


__all__ = ["coordinates", "point_count", "points", "values"]
