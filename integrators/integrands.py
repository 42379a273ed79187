"""Integrands: built-in test functions with exact answers, Python targets, and a kind registry.

An :class:`Integrand` maps points ``x`` (n, d) and discrete indices ``idx`` (n, k) to values:
(n,) float64 for ``components == 1``, (n,) complex128 for ``"complex"``, (n, m) float64 for a
vector of m components. :meth:`Integrand.evaluate` checks the output and turns any failure of
user code into a :class:`BatchError` at stage ``evaluate``, so a bad integrand fails its batch
with a clear message instead of killing a worker.

Points from the built-in samplers are column-major views (each coordinate contiguous, which
makes ``x[:, j]`` fast); code that needs C order should call ``np.ascontiguousarray(x)``.
"""

from __future__ import annotations

import importlib
import math
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from mainboard.errors import BatchError, ConfigError, SpecError
from mainboard.integrators import genz, kernels
from mainboard.integrators.spec import DomainSpec, IntegrandSpec, check_integrand
from mainboard.integrators.spec_errors import to_config_error
from mainboard.names import symbol_by_name

Components = int | Literal["complex"]
Exact = float | complex | list[float] | None
EvalFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
ColumnFn = Callable[[np.ndarray, int, int], "np.ndarray | None"]
Factory = Callable[[Any, int, tuple[int, ...]], "Integrand"]
_REGISTRY: dict[str, Factory] = {}
CORNER_PEAK_MAX_EXACT_DIM = 22  # 2^d vertex terms
# Kinds whose code lives in optional modules, imported on first use by _factory.
_LAZY = {"process": "mainboard.integrators.process.adapters:process_integrand"}


@dataclass(frozen=True)
class Integrand:
    """A vectorised function with its value kind and, when known, its exact integral."""

    kind: str
    dim: int
    fn: EvalFn
    components: Components = 1
    exact: Exact = None
    label: str = ""
    # True for row-wise functions that may be called on slices of a batch (built-ins); user
    # and process integrands always get the whole batch in one call.
    sliceable: bool = False
    # A compiled twin for points by column (``kernels.column_values``): the values at rows
    # lo .. hi from x.T, the same numbers as ``fn``, or None when it cannot run (then fn).
    columns: ColumnFn | None = None

    @property
    def width(self) -> int:
        """Number of real columns the accumulator keeps (2 for complex)."""
        return 2 if self.components == "complex" else int(self.components)

    def evaluate(self, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Values at the points; raises BatchError('evaluate', ...) on exceptions or bad output."""
        try:
            values = self.fn(x, idx)
        except Exception as exc:  # user code: report, never crash the worker
            where = traceback.extract_tb(exc.__traceback__)[-1]
            raise BatchError("evaluate", f"integrand {self.label or self.kind} raised "
                             f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
                             ) from exc
        return check_values(values, x.shape[0], self.components, self.label or self.kind)

    def evaluate_rows(self, x: np.ndarray, idx: np.ndarray, rows: slice,
                      cols: np.ndarray | None) -> np.ndarray:
        """Values at ``rows`` of a batch (a sliceable integrand); ``cols``: its points by
        column (x.T, C-contiguous) when they come so, for the compiled twin."""
        if cols is not None and self.columns is not None:
            values = self.columns(cols, rows.start, rows.stop)
            if values is not None:
                return values
        return self.evaluate(x[rows], idx[rows])


def check_values(values: Any, n: int, components: Components, label: str) -> np.ndarray:
    """Coerce integrand output to the declared kind, or say exactly what is wrong with it."""
    stage = "evaluate"
    if not isinstance(values, np.ndarray):
        raise BatchError(stage, f"integrand {label} returned {type(values).__name__}, "
                                "expected a numpy array")
    if values.dtype.kind not in "fiuc":
        raise BatchError(stage, f"integrand {label} returned dtype {values.dtype.name}, "
                                "expected a real or complex numeric array")
    if components == "complex":
        want: tuple[int, ...] = (n,)
        out = values.astype(np.complex128, copy=False)
    else:
        if values.dtype.kind == "c":
            raise BatchError(stage, f"integrand {label} returned complex values but declares "
                                    f"{components} real component(s); set components = "
                                    "\"complex\"")
        want = (n,) if components == 1 else (n, int(components))
        out = values.astype(np.float64, copy=False)
        if components == 1 and values.shape == (n, 1):
            out = out[:, 0]
    if out.shape != want:
        raise BatchError(stage, f"integrand {label} returned shape {values.shape}, "
                                f"expected {want} for {n} points")
    return out


def register_integrand(kind: str, factory: Factory) -> None:
    """Add a kind: ``factory(spec_model, dim, discrete_cardinalities) -> Integrand``."""
    _REGISTRY[kind] = factory


def make_integrand(spec: Any, dim: int, discrete: Sequence[int] = ()) -> Integrand:
    """Build the integrand a run spec's ``[integrand]`` table (model or plain dict) describes."""
    if isinstance(spec, Mapping):
        try:
            spec = _IntegrandOnly.model_validate({"integrand": dict(spec)}).integrand
        except ValidationError as exc:
            raise to_config_error(exc, _IntegrandOnly, file=None, text=None) from None

    try:
        check_integrand(spec, dim, DomainSpec(continuous=max(dim, 1), discrete=list(discrete)))
    except SpecError as exc:
        raise ConfigError(str(exc), key=exc.key, value=exc.value, valid=exc.valid) from None
    return _factory(spec.kind)(spec, dim, tuple(int(c) for c in discrete))


def _factory(kind: str) -> Factory:
    """The factory of ``kind``; a kind listed in ``_LAZY`` is imported and registered on first
    use (the one mechanism for optional kinds: ``process`` pulls in subprocess machinery)."""
    if kind not in _REGISTRY and kind in _LAZY:
        register_integrand(kind, symbol_by_name(_LAZY[kind]))
    return _REGISTRY[kind]  # every kind of the run-file model is registered


class _IntegrandOnly(BaseModel):
    """Root for validating a bare ``[integrand]`` table so errors say ``integrand.<key>``."""

    model_config = ConfigDict(extra="forbid")
    integrand: IntegrandSpec


def _vec(values: Sequence[float] | None, dim: int, default: float) -> np.ndarray:
    return np.full(dim, default) if values is None else np.asarray(values, dtype=np.float64)


def _genz(spec: Any, dim: int, discrete: tuple[int, ...]) -> Integrand:
    fn, exact_fn = genz.FAMILIES[spec.kind]
    a, u = _vec(spec.a, dim, 0.0), _vec(spec.u, dim, 0.5)
    big = spec.kind == "genz.corner_peak" and dim > CORNER_PEAK_MAX_EXACT_DIM
    # Discrete dimensions are summed over: each channel contributes the same integral.
    exact = None if big else exact_fn(a, u) * math.prod(discrete)
    return Integrand(spec.kind, dim, lambda x, idx: fn(x, a, u), exact=exact, label=spec.kind,
                     sliceable=True, columns=kernels.column_values(spec.kind, a, u))


def _constant(spec: Any, dim: int, discrete: tuple[int, ...]) -> Integrand:
    value = float(spec.value)
    channels = math.prod(discrete)
    return Integrand("constant", dim, lambda x, idx: np.full(x.shape[0], value),
                     exact=value * channels, label="constant", sliceable=True)


def _polynomial(spec: Any, dim: int, discrete: tuple[int, ...]) -> Integrand:
    coeffs = np.asarray(spec.coefficients, dtype=np.float64)
    one_d = math.fsum(c / (k + 1) for k, c in enumerate(spec.coefficients))
    # np.polyval wants the highest power first.
    return Integrand("polynomial", dim,
                     lambda x, idx: np.prod(np.polyval(coeffs[::-1], x), axis=1),
                     exact=one_d ** dim * math.prod(discrete), label="polynomial",
                     sliceable=True)


def _peak_1d(sigma: float, u: float) -> float:
    """int_0^1 of the normalised 1-d Gaussian N(t; u, sigma)."""
    s = sigma * math.sqrt(2.0)
    return 0.5 * (math.erf((1 - u) / s) + math.erf(u / s))


def _normal(x: np.ndarray, u: np.ndarray, sigma: float | np.ndarray) -> np.ndarray:
    """prod_i N(x_i; u_i, sigma) with sigma one number or one per row."""
    sig = sigma if np.ndim(sigma) == 0 else np.asarray(sigma)[:, None]
    t = x - u
    t /= sig
    t *= t
    r2 = t.sum(axis=1)
    r2 *= -0.5
    np.exp(r2, out=r2)
    r2 /= (math.sqrt(2 * math.pi) * np.asarray(sigma)) ** x.shape[1]
    return r2


def _gaussian_peak(spec: Any, dim: int, discrete: tuple[int, ...]) -> Integrand:
    u, sigma = _vec(spec.u, dim, 0.5), float(spec.sigma)
    exact = math.prod(_peak_1d(sigma, float(uj)) for uj in u) * math.prod(discrete)
    return Integrand("gaussian_peak", dim, lambda x, idx: _normal(x, u, sigma), exact=exact,
                     label="gaussian_peak", sliceable=True)


def ridge(x: np.ndarray, centres: np.ndarray, sigma: float) -> np.ndarray:
    """mean_k N(x; c_k (1, ..., 1), sigma): |x - c 1|^2 = |x|^2 - 2 c sum(x) + d c^2, so
    one (n, peaks) array instead of one (n, d) array per peak."""
    d = x.shape[1]
    s1, s2 = x.sum(axis=1), np.einsum("ij,ij->i", x, x)
    r2 = np.multiply.outer(s1, -2.0 * centres)
    r2 += s2[:, None]
    r2 += d * centres * centres
    r2 *= -0.5 / (sigma * sigma)
    np.exp(r2, out=r2)
    return r2.mean(axis=1) / (math.sqrt(2 * math.pi) * sigma) ** d


def _ridge(spec: Any, dim: int, discrete: tuple[int, ...]) -> Integrand:
    centres = np.linspace(float(spec.low), float(spec.high), int(spec.peaks))
    sigma = float(spec.sigma)
    exact = math.fsum(_peak_1d(sigma, float(c)) ** dim for c in centres) / centres.size
    return Integrand("ridge", dim, lambda x, idx: ridge(x, centres, sigma),
                     exact=exact * math.prod(discrete), label="ridge", sliceable=True)


def _complex_exponential(spec: Any, dim: int, discrete: tuple[int, ...]) -> Integrand:
    a = np.asarray(spec.a, dtype=np.float64)
    exact = complex(math.prod(discrete))
    for aj in spec.a:
        exact *= 1.0 if aj == 0 else (complex(math.cos(aj), math.sin(aj)) - 1.0) / (1j * aj)
    return Integrand("complex_exponential", dim, lambda x, idx: np.exp(1j * (x * a).sum(axis=1)),
                     components="complex", exact=exact, label="complex_exponential",
                     sliceable=True)


def _moments(spec: Any, dim: int, discrete: tuple[int, ...]) -> Integrand:
    powers = np.asarray(spec.powers, dtype=np.float64)

    exact = [(1.0 / (p + 1)) ** dim * math.prod(discrete) for p in spec.powers]
    return Integrand("moments", dim, lambda x, idx: np.prod(x[:, :, None] ** powers, axis=1),
                     components=len(spec.powers), exact=exact, label="moments",
                     sliceable=True)


def _channels(spec: Any, dim: int, discrete: tuple[int, ...]) -> Integrand:
    coeffs = np.asarray(spec.coefficients, dtype=np.float64)
    channels = coeffs.size
    sigmas = np.broadcast_to(np.asarray(spec.sigma, dtype=np.float64), (channels,)).copy()
    u = _vec(spec.u, dim, 0.5)
    cards = discrete or (1,)

    def fn(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        c = np.ravel_multi_index(tuple(idx.T), cards) if discrete else np.zeros(x.shape[0], int)
        return coeffs[c] * _normal(x, u, sigmas[c])

    exact = math.fsum(float(coeffs[c]) * math.prod(_peak_1d(float(sigmas[c]), float(uj))
                                                   for uj in u) for c in range(channels))
    return Integrand("channels", dim, fn, exact=exact, label="channels", sliceable=True)


def load_target(target: str, key: str = "integrand.target") -> Callable[..., Any]:
    """Import ``package.module:function`` (attribute paths allowed after the colon);
    errors name ``key``, the run-file key that holds the target."""
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or anything the module raises while importing
        raise ConfigError(f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}",
                          key=key, value=target) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"module {module_name!r} has no attribute {attr!r}",
                              key=key, value=target)
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"{target} is not callable", key=key, value=target)
    return obj


def exact_value(exact: Any, components: Components) -> Exact:
    """A run file's ``exact`` (number, [real, imag] or list) as the integrand's value kind
    (its shape checked by ``check_integrand`` before any factory runs)."""
    if exact is None:
        return None
    if components == "complex":
        return complex(exact[0], exact[1])
    if components == 1:
        return float(exact)
    return [float(e) for e in exact]


def _python(spec: Any, dim: int, discrete: tuple[int, ...]) -> Integrand:
    target = load_target(spec.target)
    params = dict(spec.params)
    if discrete:
        def fn(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
            return target(x, idx, **params)
    else:
        def fn(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
            return target(x, **params)
    return Integrand("python", dim, fn, components=spec.components,
                     exact=exact_value(spec.exact, spec.components), label=spec.target)


_exact_value = exact_value  # former name, still imported by integrators.process.adapters

for _kind in genz.FAMILIES:
    register_integrand(_kind, _genz)
register_integrand("constant", _constant)
register_integrand("polynomial", _polynomial)
register_integrand("gaussian_peak", _gaussian_peak)
register_integrand("complex_exponential", _complex_exponential)
register_integrand("moments", _moments)
register_integrand("channels", _channels)
register_integrand("ridge", _ridge)
register_integrand("python", _python)
