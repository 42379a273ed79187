"""Special functions needed at run time without scipy: the regularized incomplete gamma Q."""

from __future__ import annotations

import math

_EPS = 1e-15
_FPMIN = 1e-300
_ITMAX = 10_000
# Above this a the series and the fraction need more than _ITMAX terms near x = a (about
# sqrt(a) of them per digit): Q is then the Wilson-Hilferty normal form of a chi-square with
# 2a degrees of freedom, whose error falls as a grows (4e-9 at 1e6, 4e-10 at 1e7).
_LARGE_A = 1e6


def _series_p(a: float, x: float) -> float:
    """P(a, x) by its power series (converges fast for x < a + 1)."""
    ap, term = a, 1.0 / a
    total = term
    for _ in range(_ITMAX):
        ap += 1.0
        term *= x / ap
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _continued_fraction_q(a: float, x: float) -> float:
    """Q(a, x) by Lentz's continued fraction (converges fast for x >= a + 1)."""
    b = x + 1.0 - a
    c = 1.0 / _FPMIN
    d = 1.0 / b
    h = d
    for i in range(1, _ITMAX):  # converges in under 1,000 of _ITMAX steps
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _FPMIN if abs(d) < _FPMIN else d
        c = b + an / c
        c = _FPMIN if abs(c) < _FPMIN else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def _wilson_hilferty_q(a: float, x: float) -> float:
    """Q(a, x) for large ``a``: P(chi-square with 2a dof > 2x), its cube root taken as normal."""
    spread = 1.0 / (9.0 * a)
    z = ((x / a) ** (1.0 / 3.0) - (1.0 - spread)) / math.sqrt(spread)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def gammaq(a: float, x: float) -> float:
    """Regularized upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a); chi2 p-value is
    Q(dof / 2, chi2 / 2)."""
    if not a > 0 or not x >= 0:  # NaN too
        raise ValueError(f"gammaq needs a > 0 and x >= 0, got a={a}, x={x}")
    if x == 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    if a > _LARGE_A:
        return _wilson_hilferty_q(a, x)
    if x < a + 1.0:
        return max(0.0, 1.0 - _series_p(a, x))
    return _continued_fraction_q(a, x)
