"""The integration domain and the batch contract every stage must keep.

A :class:`Batch` is what flows between materialize, transforms and evaluate: points ``x``,
discrete indices ``idx`` and per-sample ``weights`` (Jacobian divided by sampling density).
:func:`validate` checks a batch after each stage so a broken stage is named, not a later one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from mainboard.errors import BatchError

MAX_CHANNELS = 1 << 20


def too_many_channels(cards: Sequence[int]) -> str | None:
    """Why ``cards`` has more joint values than the samplers' per-channel tables may hold
    (None when it fits); the run file's ``[domain]`` and :class:`Domain` both ask here."""
    channels = math.prod(cards)
    if channels <= MAX_CHANNELS:
        return None
    return f"{channels} channels (the product of the cardinalities); at most {MAX_CHANNELS} " \
           "are supported"


class Region(StrEnum):
    """Where the continuous points of a batch live, so range checks fit each stage's output."""

    CUBE = "cube"      # [0, 1)^d
    BALL = "ball"      # |x - center| <= radius
    SPHERE = "sphere"  # |x - center| == radius
    REAL = "real"      # any finite point


@dataclass(frozen=True)
class Domain:
    """Unit hypercube of ``continuous`` dimensions times discrete dimensions of given cardinalities."""

    continuous: int
    discrete: tuple[int, ...] = ()

    def __init__(self, continuous: int, discrete: Sequence[int] = ()) -> None:
        if isinstance(continuous, bool) or not isinstance(continuous, int | np.integer) \
                or continuous < 1:
            raise ValueError(f"domain.continuous must be an integer >= 1, got {continuous!r}")
        cards = tuple(int(c) for c in discrete)
        if any(c < 1 for c in cards):
            raise ValueError(f"domain.discrete cardinalities must be >= 1, got {list(discrete)}")
        why = too_many_channels(cards)
        if why:
            raise ValueError(f"domain.discrete has {why}")
        object.__setattr__(self, "continuous", int(continuous))
        object.__setattr__(self, "discrete", cards)

    @property
    def channels(self) -> int:
        """Number of joint discrete values (1 when there are no discrete dimensions)."""
        return int(np.prod(self.discrete, dtype=np.int64)) if self.discrete else 1

    def unflatten(self, channel: np.ndarray) -> np.ndarray:
        """Flat channel numbers -> (n, k) int64 discrete indices (row-major over ``discrete``)."""
        if not self.discrete:
            return np.zeros((channel.shape[0], 0), dtype=np.int64)
        return np.stack(np.unravel_index(channel, self.discrete), axis=1).astype(np.int64)

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"continuous": self.continuous, "discrete": list(self.discrete)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Domain:
        """Inverse of :meth:`to_dict`."""
        return cls(int(data["continuous"]), [int(c) for c in data.get("discrete", [])])


@dataclass
class Batch:
    """Concrete samples: ``x`` (n, d) float64, ``idx`` (n, k) int64, ``weights`` (n,) float64.

    ``aux`` carries sampler-private per-sample arrays (e.g. VEGAS bin numbers) that transforms
    pass through untouched so the sampler can turn evaluated values into training data.
    ``in_cube``: the sampler made every point in [0, 1)^d by construction (the compiled
    VEGAS map from checked tables: ``kernels.maps_into_cube``); the materialize stage then
    skips its own pass over the points. Never carried over: a replaced, transformed or
    decoded batch is checked again.
    """

    x: np.ndarray
    idx: np.ndarray
    weights: np.ndarray
    aux: dict[str, np.ndarray] = field(default_factory=dict)
    in_cube: bool = False

    @property
    def n(self) -> int:
        """Number of samples."""
        return int(self.weights.shape[0])

    def replace(self, *, x: np.ndarray, weights: np.ndarray) -> Batch:
        """A batch with new points and weights, same indices and sampler data."""
        return Batch(x=x, idx=self.idx, weights=weights, aux=self.aux)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (arrays stay numpy arrays for a binary codec)."""
        return {"x": self.x, "idx": self.idx, "weights": self.weights, "aux": dict(self.aux)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Batch:
        """Inverse of :meth:`to_dict`; accepts lists as well as arrays."""
        return cls(x=np.asarray(data["x"], dtype=np.float64),
                   idx=np.asarray(data["idx"], dtype=np.int64),
                   weights=np.asarray(data["weights"], dtype=np.float64),
                   aux={k: np.asarray(v) for k, v in data.get("aux", {}).items()})


def _check_array(stage: str, name: str, value: Any, kind: str, shape: tuple[int, ...]) -> None:
    if not isinstance(value, np.ndarray):
        raise BatchError(stage, f"{name} must be a numpy array, got {type(value).__name__}")
    want = np.float64 if kind == "f" else np.int64
    if value.dtype != want:
        raise BatchError(stage, f"{name} must have dtype {np.dtype(want).name}, "
                                f"got {value.dtype.name}")
    if value.shape != shape:
        raise BatchError(stage, f"{name} must have shape {shape}, got {value.shape}")


def validate(batch: Batch, domain: Domain, stage: str, *, dim: int | None = None,
             region: Region = Region.CUBE, center: np.ndarray | None = None,
             radius: float = 1.0, in_cube: bool = False) -> Batch:
    """Check shape, dtype, range and finiteness; raise :class:`BatchError` naming ``stage``.

    ``dim``/``region``/``center``/``radius`` describe where a transform put the points; by
    default the points must lie in the unit cube of the domain. ``in_cube``: they were
    checked into it where they were made (``Batch.in_cube``); the range pass is skipped.
    """
    if not isinstance(batch, Batch):
        raise BatchError(stage, f"expected a Batch, got {type(batch).__name__}")
    d = domain.continuous if dim is None else dim
    weights = batch.weights
    if not isinstance(weights, np.ndarray) or weights.ndim != 1:
        raise BatchError(stage, "weights must be a 1-d numpy array, got "
                                f"{getattr(weights, 'shape', type(weights).__name__)}")
    n = weights.shape[0]
    _check_array(stage, "weights", weights, "f", (n,))
    _check_array(stage, "x", batch.x, "f", (n, d))
    _check_array(stage, "idx", batch.idx, "i", (n, len(domain.discrete)))
    with np.errstate(over="ignore", invalid="ignore"):
        total = weights.sum()
    if not np.isfinite(total):
        bad = ~np.isfinite(weights)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise BatchError(stage, f"{int(bad.sum())} of {n} weights are not finite "
                                    f"(first at sample {first}: {weights[first]!r})")
    if n and weights.min() < 0:
        raise BatchError(stage, "weights must be >= 0 (a Jacobian over a density)")
    if not (in_cube and region is Region.CUBE):
        _check_points(stage, batch.x, region, center, radius)
    if domain.discrete:
        cards = np.asarray(domain.discrete, dtype=np.int64)
        out = (batch.idx < 0) | (batch.idx >= cards)
        if out.any():
            col = int(np.flatnonzero(out.any(axis=0))[0])
            raise BatchError(stage, f"discrete index column {col} outside [0, {cards[col]})")
    for key, arr in batch.aux.items():
        if not isinstance(arr, np.ndarray) or arr.shape[:1] != (n,):
            raise BatchError(stage, f"aux[{key!r}] must be an array with {n} rows")
    return batch


def _check_points(stage: str, x: np.ndarray, region: Region, center: np.ndarray | None,
                  radius: float) -> None:
    """Range check for one region; the error says how many points are out and the first one."""
    if region is Region.CUBE:
        if x.size == 0 or (x.min() >= 0.0 and x.max() < 1.0):
            return
        out = ~((x >= 0.0) & (x < 1.0))
        what = "outside the unit cube [0, 1)"
    else:
        out = ~np.isfinite(x)
        what = "not finite"
        if not out.any() and region is not Region.REAL:
            c = np.zeros(x.shape[1]) if center is None else center
            r = np.sqrt(((x - c) ** 2).sum(axis=1))
            tol = 1e-9 * radius
            if region is Region.BALL:
                bad_rows = r > radius + tol
                what = f"outside the ball of radius {radius}"
            else:
                bad_rows = np.abs(r - radius) > tol
                what = f"off the sphere of radius {radius}"
            out = bad_rows[:, None]
    rows = out.any(axis=1) if out.ndim == 2 else out
    if rows.any():
        first = int(np.flatnonzero(rows)[0])
        raise BatchError(stage, f"{int(rows.sum())} of {x.shape[0]} points {what} "
                                f"(first at sample {first}: {x[first].tolist()})")
