"""Training values as gammaboard defines them: per sample ``projection(f) * w``, signed.

Why not the built-in samplers' ``|w f|^2``: a process sampler ported from gammaboard learns
from the signed projection of the integrand value (its real part unless the run asks for
``imag``, ``abs``, ``abs_sq`` or one named component of a vector integrand) times the
sample's total weight, applied once. A sample whose value (or product) is not finite is
sent as 0; the run's non-finite count already counts it. VEGAS and the discrete sampler
keep their own ``|f w|^2`` maths (:mod:`~mainboard.integrators.stages`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mainboard.errors import SpecError
from mainboard.integrators.spec_checks import integrand_components

PROJECTIONS = ("real", "imag", "abs", "abs_sq")


def component_labels(spec: Any) -> list[str]:
    """The names a run file may use for the integrand's components (``training_projection``).

    A process integrand's list of names, ``re``/``im`` for complex values, else ``value0``,
    ``value1``, ... for vectors and ``value`` for a scalar (as the protocol names them).
    """
    comps = getattr(spec, "components", None)
    if isinstance(comps, list | tuple):
        return [str(c) for c in comps]
    count = integrand_components(spec)
    if count == "complex":
        return ["re", "im"]
    return ["value"] if count == 1 else [f"value{i}" for i in range(int(count))]


def check_projection(projection: str | None, integrand: Any) -> None:
    """Refuse a projection the integrand cannot give (``imag`` of a real value, a name that
    is not one of its components)."""
    if projection is None or projection in ("real", "abs", "abs_sq"):
        return
    labels = component_labels(integrand)
    complex_values = integrand_components(integrand) == "complex"
    if projection == "imag" and complex_values:
        return
    if projection != "imag" and projection in labels:
        return
    valid = ", ".join([*(p for p in PROJECTIONS if p != "imag" or complex_values), *labels])
    raise SpecError("sampler.training_projection", f"the integrand has no {projection!r} to "
                    "train on", projection, valid=valid)


def project(values: np.ndarray, weights: np.ndarray, projection: str,
            labels: list[str]) -> np.ndarray:
    """``projection(f) * w`` per sample (signed); non-finite results are 0.

    ``values`` is what an integrand returns: (n,) real, (n,) complex or (n, m) real. For a
    vector, ``real``/``abs``/``abs_sq`` look at its first component.
    """
    if values.ndim == 2:
        column = labels.index(projection) if projection in labels else 0
        values = values[:, column]
        projection = "real" if projection in labels else projection
    elif projection in labels:  # a scalar's own name, or re/im of a complex value
        projection = "imag" if projection == "im" else "real"
    with np.errstate(over="ignore", invalid="ignore"):
        if projection == "real":
            base = np.real(values)
        elif projection == "imag":
            base = np.imag(values)
        elif projection == "abs":
            base = np.abs(values)
        else:
            base = np.abs(values) ** 2
        out = np.asarray(base, dtype=np.float64) * weights
    return np.where(np.isfinite(out), out, 0.0)


def check_training(sampler: Any, stop: Any, integrand: Any) -> None:
    """A training phase must leave samples for the estimate; a projection must exist."""
    n = getattr(sampler, "training_samples", None)
    if n is not None and stop.max_samples is not None and n >= stop.max_samples:
        raise SpecError("sampler.training_samples", f"training_samples ({n}) must be below "
                        f"stop.max_samples ({stop.max_samples}): max_samples counts training "
                        "samples too", n, valid=f"fewer than {stop.max_samples}")
    check_projection(getattr(sampler, "training_projection", None), integrand)


__all__ = ["PROJECTIONS", "check_projection", "check_training", "component_labels", "project"]
