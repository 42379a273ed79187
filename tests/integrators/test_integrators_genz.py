"""Genz families: closed forms against scipy quadrature, and VEGAS estimates against the closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

from mainboard.integrators import genz
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.integrands import make_integrand

PARAMS = {
    1: ([3.0], [0.3]),
    2: ([3.0, 1.5], [0.3, 0.6]),
    3: ([2.5, 1.0, 4.0], [0.25, 0.7, 0.5]),
}


def _quad(kind: str, a: list[float], u: list[float]) -> float:
    """High-precision adaptive quadrature, told where the kinks and jumps are."""
    fn = genz.FAMILIES[kind][0]
    d = len(a)
    av, uv = np.asarray(a), np.asarray(u)

    def f(*x: float) -> float:
        return float(fn(np.asarray([x]), av, uv)[0])

    kinked = kind in ("genz.continuous", "genz.discontinuous")
    opts = [{"epsabs": 1e-13, "epsrel": 1e-12, "limit": 200}
            | ({"points": [u[i]]} if kinked and 0 < u[i] < 1 else {}) for i in range(d)]
    value, _err = integrate.nquad(f, [(0.0, 1.0)] * d, opts=opts)
    return value


SMOOTH = ("genz.oscillatory", "genz.corner_peak", "genz.gaussian")


@pytest.mark.parametrize(("kind", "d"), [(k, d) for k in genz.FAMILIES for d in (1, 2)]
                         + [(k, 3) for k in SMOOTH])
def test_exact_matches_quadrature(kind: str, d: int) -> None:
    """d = 3 only for the smooth families: kinks make 3-d nested quadrature slow."""
    a, u = PARAMS[d]
    exact = genz.FAMILIES[kind][1](np.asarray(a), np.asarray(u))
    assert exact == pytest.approx(_quad(kind, a, u), rel=1e-9, abs=1e-12)


def test_exact_handles_zero_difficulty_and_outside_shift() -> None:
    # a = 0 makes the dimension trivial; u outside [0, 1] moves the kink off the cube.
    a, u = np.array([0.0, 2.0]), np.array([0.5, 1.3])
    assert genz.exact_gaussian(a, u) == pytest.approx(_quad("genz.gaussian", [0.0, 2.0], [0.5, 1.3]),
                                                      rel=1e-10)
    assert genz.exact_continuous(a, u) == pytest.approx(
        _quad("genz.continuous", [0.0, 2.0], [0.5, 1.3]), rel=1e-10)
    assert genz.exact_continuous(np.array([2.0]), np.array([-0.5])) == pytest.approx(
        _quad("genz.continuous", [2.0], [-0.5]), rel=1e-10)


DIFFICULTY = {"genz.oscillatory": 0.9, "genz.product_peak": 7.0, "genz.corner_peak": 0.6,
              "genz.gaussian": 5.0, "genz.continuous": 2.0, "genz.discontinuous": 2.0}


@pytest.mark.parametrize("kind", list(genz.FAMILIES))
@pytest.mark.parametrize("d", [2, 5, 8])
def test_vegas_lands_within_four_sigma(kind: str, d: int) -> None:
    spec = {"name": "genz", "seed": 11 + d, "domain": {"continuous": d},
            "integrand": {"kind": kind, "a": [DIFFICULTY[kind]] * d,
                          "u": [0.7 if kind == "genz.discontinuous" else 0.4] * d},
            "sampler": {"kind": "vegas", "bins": 32},
            "accumulator": {"discard": 1},
            "stop": {"max_iterations": 6},
            "batching": {"batch_size": 5000, "batches_per_iteration": 2}}
    result = integrate_local(spec)
    assert result.samples == 60_000 and result.nan_count == 0
    assert result.error > 0
    assert abs(result.estimate - result.exact) < 4 * result.error, result.to_dict()


def test_integrand_exacts_for_simple_kinds() -> None:
    """Constant, polynomial, normalised peak, complex exponential and moments against quadrature."""
    cases = [({"kind": "constant", "value": 2.5}, lambda x, y: 2.5),
             ({"kind": "polynomial", "coefficients": [1.0, -2.0, 3.0]},
              lambda x, y: (1 - 2 * x + 3 * x * x) * (1 - 2 * y + 3 * y * y)),
             ({"kind": "gaussian_peak", "sigma": 0.2, "u": [0.3, 0.9]},
              lambda x, y: np.exp(-((x - 0.3) ** 2 + (y - 0.9) ** 2) / 0.08) / (2 * np.pi * 0.04))]
    for spec, fn in cases:
        integrand = make_integrand(spec, 2)
        want, _ = integrate.dblquad(fn, 0, 1, 0, 1, epsabs=1e-12, epsrel=1e-12)
        assert integrand.exact == pytest.approx(want, rel=1e-9), spec
    cexp = make_integrand({"kind": "complex_exponential", "a": [1.0, 2.5]}, 2)
    re, _ = integrate.dblquad(lambda x, y: np.cos(y + 2.5 * x), 0, 1, 0, 1)
    im, _ = integrate.dblquad(lambda x, y: np.sin(y + 2.5 * x), 0, 1, 0, 1)
    assert cexp.exact == pytest.approx(complex(re, im), rel=1e-9)
    moments = make_integrand({"kind": "moments", "powers": [0, 1, 3]}, 2)
    assert moments.exact == pytest.approx([1.0, 0.25, 1 / 16])
