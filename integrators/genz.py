"""The six Genz test families in standard form and their exact integrals over [0, 1]^d.

Every family is separable or nearly so, which is what makes the closed forms below possible:
``a`` sets the difficulty and ``u`` the shift, one value per dimension.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

Array = np.ndarray


def _lin(x: Array, a: Array) -> Array:
    """sum_i a_i x_i per row, as an explicit reduction (no BLAS, so results are reproducible)."""
    t = x * a
    return t.sum(axis=1)


def _shifted(x: Array, u: Array) -> Array:
    """x - u as a new array the callers below then transform in place (one temporary)."""
    return np.subtract(x, u)


def oscillatory(x: Array, a: Array, u: Array) -> Array:
    """cos(2 pi u_1 + sum a_i x_i)."""
    return _cos_shifted(_lin(x, a), u, x.shape[1])


def product_peak(x: Array, a: Array, u: Array) -> Array:
    """prod 1 / (a_i^-2 + (x_i - u_i)^2)."""
    t = _shifted(x, u)
    t *= t
    t += a ** -2.0
    np.reciprocal(t, out=t)
    return np.prod(t, axis=1)


def corner_peak(x: Array, a: Array, u: Array) -> Array:
    """(1 + sum a_i x_i)^-(d+1)."""
    return _corner_power(_lin(x, a), u, x.shape[1])


def gaussian(x: Array, a: Array, u: Array) -> Array:
    """exp(-sum a_i^2 (x_i - u_i)^2)."""
    t = _shifted(x, u)
    t *= a
    t *= t
    return _exp_negative(t.sum(axis=1), u, x.shape[1])


def continuous(x: Array, a: Array, u: Array) -> Array:
    """exp(-sum a_i |x_i - u_i|)."""
    t = _shifted(x, u)
    np.abs(t, out=t)
    t *= a
    return _exp_negative(t.sum(axis=1), u, x.shape[1])


def _exp_negative(s: Array, u: Array, d: int) -> Array:
    """exp(-s), in place."""
    np.negative(s, out=s)
    return np.exp(s, out=s)


def _cos_shifted(s: Array, u: Array, d: int) -> Array:
    """cos(2 pi u_1 + s), in place."""
    s += 2.0 * math.pi * u[0]
    return np.cos(s, out=s)


def _corner_power(s: Array, u: Array, d: int) -> Array:
    """(1 + s)^-(d+1), in place."""
    s += 1.0
    return np.power(s, -(d + 1.0), out=s)


#: The families that are a sum over the axes of one term per coordinate, finished by numpy:
#: kind -> (the term: 0 (a (x - u))^2, 1 a |x - u|, 2 x a; the finish of the row sums s).
#: A compiled twin (``kernels.column_values``) adds the terms axis by axis, as numpy's sum
#: over axis 1 of a column-major array does, and hands s to the same finish.
COLUMN_SUMS: dict[str, tuple[int, Callable[[Array, Array, int], Array]]] = {
    "genz.gaussian": (0, _exp_negative),
    "genz.continuous": (1, _exp_negative),
    "genz.oscillatory": (2, _cos_shifted),
    "genz.corner_peak": (2, _corner_power),
}


def discontinuous(x: Array, a: Array, u: Array) -> Array:
    """0 if x_1 > u_1 or x_2 > u_2, else exp(sum a_i x_i)."""
    outside = x[:, 0] > u[0]
    if x.shape[1] > 1:
        outside |= x[:, 1] > u[1]
    s = _lin(x, a)
    np.exp(s, out=s)
    s[outside] = 0.0
    return s


# ------------------------------------------------------------------ exact integrals
def _exp_integral(a: float, upper: float = 1.0) -> float:
    """int_0^upper exp(a t) dt, stable for small a."""
    return upper if a == 0.0 else math.expm1(a * upper) / a


def exact_oscillatory(a: Array, u: Array) -> float:
    """Re[e^{i 2 pi u_1} prod_j int_0^1 e^{i a_j x} dx], int = (e^{i a} - 1) / (i a)."""
    z = complex(math.cos(2 * math.pi * u[0]), math.sin(2 * math.pi * u[0]))
    for aj in a:
        z *= 1.0 if aj == 0 else (complex(math.cos(aj), math.sin(aj)) - 1.0) / (1j * aj)
    return z.real


def exact_product_peak(a: Array, u: Array) -> float:
    """prod_j a_j [arctan(a_j (1 - u_j)) + arctan(a_j u_j)]  (from int dt/(a^-2+t^2) = a atan(a t))."""
    return math.prod(float(aj) * (math.atan(aj * (1 - uj)) + math.atan(aj * uj))
                     for aj, uj in zip(a, u, strict=True))


def exact_corner_peak(a: Array, u: Array) -> float:
    """Inclusion-exclusion over the cube's vertices v: sum (-1)^|v| / (1 + a.v) / (d! prod a).

    Integrating (c + a_j t)^-m over t in [0, 1] gives the difference of the powers one lower at
    t = 0 and t = 1 divided by a_j (m - 1); d integrations from m = d + 1 leave one term per
    vertex.
    """
    d = len(a)
    terms = []
    for v in itertools.product((0, 1), repeat=d):
        terms.append((-1) ** sum(v) / (1.0 + sum(aj for aj, vj in zip(a, v, strict=True) if vj)))
    return math.fsum(terms) / (math.factorial(d) * math.prod(float(aj) for aj in a))


def exact_gaussian(a: Array, u: Array) -> float:
    """prod_j sqrt(pi) / (2 a_j) [erf(a_j (1 - u_j)) + erf(a_j u_j)]."""
    out = 1.0
    for aj, uj in zip(a, u, strict=True):
        aj = abs(float(aj))
        out *= 1.0 if aj == 0 else (
            math.sqrt(math.pi) / (2 * aj) * (math.erf(aj * (1 - uj)) + math.erf(aj * uj)))
    return out


def _abs_exp_1d(a: float, u: float) -> float:
    """int_0^1 exp(-a |t - u|) dt for any real u (u outside [0, 1] included)."""
    def one_side(length: float) -> float:
        # int_0^length exp(-a s) ds, signed length allowed.
        return length if a == 0 else -math.expm1(-a * length) / a

    if u <= 0:
        return math.exp(a * u) * one_side(1.0) if a else 1.0
    if u >= 1:
        return math.exp(-a * (u - 1)) * one_side(1.0) if a else 1.0
    return one_side(u) + one_side(1 - u)


def exact_continuous(a: Array, u: Array) -> float:
    """prod_j (2 - e^{-a_j u_j} - e^{-a_j (1 - u_j)}) / a_j for u in [0, 1]."""
    return math.prod(_abs_exp_1d(float(aj), float(uj)) for aj, uj in zip(a, u, strict=True))


def exact_discontinuous(a: Array, u: Array) -> float:
    """prod over the first two dims of (e^{a u} - 1)/a (clipped to [0, 1]) times (e^a - 1)/a."""
    out = 1.0
    for j, (aj, uj) in enumerate(zip(a, u, strict=True)):
        upper = min(max(float(uj), 0.0), 1.0) if j < 2 else 1.0
        out *= _exp_integral(float(aj), upper)
    return out


FAMILIES: dict[str, tuple[Callable[[Array, Array, Array], Array],
                          Callable[[Array, Array], float]]] = {
    "genz.oscillatory": (oscillatory, exact_oscillatory),
    "genz.product_peak": (product_peak, exact_product_peak),
    "genz.corner_peak": (corner_peak, exact_corner_peak),
    "genz.gaussian": (gaussian, exact_gaussian),
    "genz.continuous": (continuous, exact_continuous),
    "genz.discontinuous": (discontinuous, exact_discontinuous),
}
