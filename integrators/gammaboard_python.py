"""A gammaboard Python evaluator class (``kind = "python_scalar"``: ``module``, ``class``,
``init_args``) as a mainboard ``python`` integrand.

Why: gammaboard builds the class once per worker (``from_config(discrete_dims=...,
continuous_dims=..., init_args=...)`` when it has one, else ``Class(**init_args)``) and
calls ``eval(xs_discrete, xs_continuous)`` per batch; mainboard's ``python`` kind calls a
function per batch. :func:`evaluate` is that function: it builds each class once per
process (keyed by its definition) and hands it the batch in gammaboard's argument order.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import numpy as np

from mainboard.errors import ConfigError
from mainboard.integrators.gammaboard import ADAPTER
from mainboard.integrators.spec import RunSpec

_BUILT: dict[str, Any] = {}


def load_class(module: str, name: str, file: str | None = None) -> Any:
    """The evaluator class; a ConfigError naming ``evaluator.class`` when it cannot be
    imported (:func:`check_evaluator` calls this before anything starts: exit 2)."""
    try:
        return getattr(importlib.import_module(module), name)
    except Exception as exc:  # ImportError, AttributeError, or what the module raises
        raise ConfigError(f"cannot load the gammaboard evaluator class {module}.{name}: "
                          f"{type(exc).__name__}: {exc}", file=file, key="evaluator.class",
                          value=name, valid="a class in a module next to the run file or "
                                            "in the workspace") from None


def check_evaluator(spec: RunSpec, file: str | None = None) -> None:
    """A gammaboard evaluator class imported now, once the import roots are set: one that
    cannot be is refused in one line (exit 2) before a broker, worker or receipt exists."""
    integrand = spec.integrand
    if getattr(integrand, "target", None) == ADAPTER:  # the python kind only has a target
        load_class(integrand.params["module"], integrand.params["class"], file)


def _build(module: str, name: str, init_args: dict[str, Any], continuous: int,
           discrete: int) -> Any:
    """The class built as gammaboard builds it, once per definition and process."""
    key = json.dumps([module, name, init_args, continuous, discrete], sort_keys=True)
    if key not in _BUILT:
        cls = load_class(module, name)
        if hasattr(cls, "from_config"):
            _BUILT[key] = cls.from_config(discrete_dims=discrete, continuous_dims=continuous,
                                          init_args=init_args)
        else:
            _BUILT[key] = cls(**init_args)
    return _BUILT[key]


def evaluate(x: np.ndarray, idx: np.ndarray | None = None, **params: Any) -> np.ndarray:
    """One batch: ``x`` (n, d) continuous points, ``idx`` (n, k) discrete indices or None."""
    discrete = np.zeros((len(x), 0), dtype=np.int64) if idx is None else idx
    obj = _build(params["module"], params["class"], dict(params.get("init_args") or {}),
                 x.shape[1], discrete.shape[1])
    return np.asarray(obj.eval(discrete, x), dtype=np.float64).reshape(len(x))
