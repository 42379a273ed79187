"""Batch transforms: change of variables from the unit cube to where the integrand lives.

A transform maps a :class:`Batch` to a :class:`Batch` and multiplies the weights by its
Jacobian, so the estimator keeps integrating the same thing. Transforms compose in order;
:meth:`TransformChain.apply` validates the batch after each one and names the culprit.

- ``unit_ball``: [0,1)^d -> ball of radius R in R^d. r = R y_1^(1/d) (so the radial factor of
  the Jacobian is the constant R^d / d), direction from hyperspherical angles.
- ``spherical``: [0,1)^d -> sphere of radius R in R^(d+1), surface measure.
- ``affine``: x -> shift + scale * x (diagonal), Jacobian prod |scale|.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mainboard.errors import SpecError
from mainboard.integrators.domain import Batch, Domain, Region, validate
from mainboard.integrators.process.adapters import ProcessBatchTransform
from mainboard.integrators.spec import check_transforms


def direction(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Uniform y in [0,1)^m -> unit vectors in R^(m+1) and the surface Jacobian.

    Angles theta_1..theta_{m-1} = pi y_i and phi = 2 pi y_m; the surface element is
    pi^(m-1) 2 pi prod_j sin(theta_j)^(m-j). For m = 1 this is the circle, Jacobian 2 pi.
    """
    n, m = y.shape
    out = np.empty((n, m + 1))
    jac = np.full(n, 2.0 * math.pi * math.pi ** (m - 1))
    carry = np.ones(n)  # product of sines so far
    for j in range(m - 1):
        theta = math.pi * y[:, j]
        s = np.sin(theta)
        out[:, j] = carry * np.cos(theta)
        jac *= s ** (m - 1 - j)
        carry = carry * s
    phi = 2.0 * math.pi * y[:, m - 1]
    out[:, m - 1] = carry * np.cos(phi)
    out[:, m] = carry * np.sin(phi)
    return out, jac


@dataclass(frozen=True)
class Transform:
    """One change of variables, built from a ``[[transforms]]`` table."""

    kind: str
    output_region: Region
    radius: float = 1.0
    center: np.ndarray | None = None
    scale: np.ndarray | None = None
    shift: np.ndarray | None = None

    def apply(self, batch: Batch) -> Batch:
        """Mapped points with weights multiplied by the Jacobian."""
        y = batch.x
        if self.kind == "affine":
            assert self.scale is not None and self.shift is not None
            x = self.shift + self.scale * y
            jac = float(np.prod(np.abs(np.broadcast_to(self.scale, (y.shape[1],)))))
            return batch.replace(x=x, weights=batch.weights * jac)
        if self.kind == "unit_ball":
            d = y.shape[1]
            if d == 1:
                x = self.radius * (2.0 * y - 1.0)
                jac: float | np.ndarray = 2.0 * self.radius
            else:
                unit, jac = direction(y[:, 1:])
                r = self.radius * y[:, 0] ** (1.0 / d)
                x = unit * r[:, None]
                jac = jac * (self.radius ** d / d)
        else:  # spherical
            unit, jac = direction(y)
            x = unit * self.radius
            jac = jac * self.radius ** y.shape[1]
        if self.center is not None:
            x = x + self.center
        return batch.replace(x=x, weights=batch.weights * jac)


def make_transform(spec: Any, domain: Domain) -> Any:
    """A transform object from a transform spec model (process ones from their own module)."""
    if spec.kind == "process":
        return ProcessBatchTransform(spec, domain)
    if spec.kind == "affine":
        return Transform("affine", Region.REAL, scale=np.asarray(spec.scale, dtype=np.float64),
                         shift=np.asarray(spec.shift, dtype=np.float64))
    center = None if spec.center is None else np.asarray(spec.center, dtype=np.float64)
    region = Region.BALL if spec.kind == "unit_ball" else Region.SPHERE
    return Transform(spec.kind, region, radius=float(spec.radius), center=center)


class TransformChain:
    """Transforms in order, with the dimension and region after each for validation.

    Any object with ``kind``, ``apply(batch)``, ``output_region``, ``center`` and ``radius``
    works as a transform (process transforms are such objects).
    """

    def __init__(self, specs: Sequence[Any], domain: Domain) -> None:
        try:
            check_transforms(list(specs), domain.continuous)
        except SpecError as exc:
            raise ValueError(f"{exc.key}: {exc}") from None
        self.domain = domain
        self.transforms = [make_transform(s, domain) for s in specs]
        self.dims: list[int] = []
        d = domain.continuous
        for s in specs:
            d = s.output_dim(d)
            self.dims.append(d)

    @property
    def output_dim(self) -> int:
        """Dimension of the points the integrand receives."""
        return self.dims[-1] if self.dims else self.domain.continuous

    def measure(self) -> float | None:
        """Volume of the region the chain maps the unit cube onto (with its measure: volume
        of a ball, area of a sphere), or None when not known in closed form (a ball or
        sphere after another transform, a process transform)."""
        total, d = 1.0, self.domain.continuous
        for i, (t, out_dim) in enumerate(zip(self.transforms, self.dims, strict=True)):
            if t.kind == "affine":
                scale = np.broadcast_to(np.abs(t.scale), (out_dim,))
                total *= float(np.prod(scale))
            elif t.kind in ("unit_ball", "spherical") and i == 0:
                m = d if t.kind == "unit_ball" else d + 1  # ball in R^d, sphere in R^(d+1)
                unit = (math.pi ** (m / 2) / math.gamma(m / 2 + 1) if t.kind == "unit_ball"
                        else 2 * math.pi ** (m / 2) / math.gamma(m / 2))
                total *= unit * t.radius ** (m if t.kind == "unit_ball" else m - 1)
            else:
                return None
        return total

    def exact(self, integrand_kind: str, exact: Any) -> Any:
        """The exact value of the transformed problem: built-in exact values are integrals
        over the unit cube, so with transforms only ``constant`` keeps one (its value times
        :meth:`measure`); an ``exact`` the run file states itself is the user's and kept."""
        if not self.transforms or exact is None or integrand_kind in ("python", "process"):
            return exact
        if integrand_kind != "constant":
            return None
        measure = self.measure()
        return None if measure is None else exact * measure

    def apply(self, batch: Batch) -> Batch:
        """Every transform in turn, validating after each (stage ``transform[i]:kind``)."""
        for i, (t, d) in enumerate(zip(self.transforms, self.dims, strict=True)):
            with np.errstate(over="ignore", invalid="ignore"):  # validate reports non-finite
                batch = t.apply(batch)
            validate(batch, self.domain, f"transform[{i}]:{t.kind}", dim=d,
                     region=t.output_region, center=t.center, radius=t.radius)
        return batch
