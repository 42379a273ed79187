"""Cross-field checks of a run spec, shared by the pydantic models and the stage builders.

Each raises :class:`SpecError` carrying the dotted key to blame, so the run-file error names
the right line even when the problem spans several tables.
"""

from __future__ import annotations

import math
from typing import Any

from mainboard.errors import SpecError


def integrand_components(spec: Any) -> int | str:
    """1 for scalar integrands, "complex", or the length of a vector integrand."""
    if spec.kind == "complex_exponential":
        return "complex"
    if spec.kind == "moments":
        return len(spec.powers)
    return getattr(spec, "components", 1)


def check_transforms(transforms: list[Any], d: int) -> None:
    """Ball, sphere and process transforms take the unit cube, so only cube-to-cube (process)
    transforms may come before them; centres and scales must fit the dimension."""
    dim, in_cube = d, True
    for i, t in enumerate(transforms):
        if t.kind in ("unit_ball", "spherical", "process"):
            if not in_cube:
                raise SpecError(f"transforms.{i}.kind", f"{t.kind} maps the unit cube, so it "
                                "must come before any unit_ball, spherical or affine transform",
                                t.kind, valid="process transforms first, then at most one "
                                "unit_ball or spherical, then affine ones")
        if t.kind in ("unit_ball", "spherical"):
            out = t.output_dim(dim)  # dim >= 1 here: a sphere's is at least 2
            if t.center is not None and len(t.center) != out:
                raise SpecError(f"transforms.{i}.center", f"center needs {out} entries",
                                t.center, valid=_numbers(out))
        elif t.kind == "affine":
            for name in ("scale", "shift"):
                val = getattr(t, name)
                if isinstance(val, list) and len(val) != dim:
                    raise SpecError(f"transforms.{i}.{name}", f"{name} needs {dim} entries "
                                    "(or one number)", val,
                                    valid=f"one finite number, or {_numbers(dim)}")
        in_cube = in_cube and t.kind == "process"
        dim = t.output_dim(dim)


def check_integrand(spec: Any, dim: int, domain: Any) -> None:
    """Parameter lengths must match the integrand's dimension and the channel count."""
    for name in ("a", "u"):
        val = getattr(spec, name, None)
        if val is not None and len(val) != dim:
            raise SpecError(f"integrand.{name}", f"{spec.kind} needs {dim} entries in {name} "
                            f"(the integrand's dimension)", val, valid=_numbers(dim))
    if spec.kind == "channels":
        channels = math.prod(domain.discrete) if domain.discrete else 1
        if len(spec.coefficients) != channels:
            raise SpecError("integrand.coefficients", f"channels needs one coefficient per "
                            f"discrete channel ({channels})", spec.coefficients,
                            valid=_numbers(channels))
        if isinstance(spec.sigma, list) and len(spec.sigma) != channels:
            raise SpecError("integrand.sigma", f"sigma needs 1 or {channels} entries",
                            spec.sigma, valid=f"one number greater than 0, or "
                            f"{_numbers(channels)} greater than 0")
    exact = getattr(spec, "exact", None)
    if exact is not None:
        comps = integrand_components(spec)
        check_exact(exact, len(comps) if isinstance(comps, list) else comps, "integrand.exact")


def check_exact(exact: Any, components: int | str, key: str = "exact") -> None:
    """A known answer has the integrand's value shape: one number, [real, imag] for a complex
    integrand, or one number per component of a vector one."""
    if components == "complex":
        if not isinstance(exact, list) or len(exact) != 2:
            raise SpecError(key, "exact for a complex integrand is [real, imag]", exact,
                            valid=_numbers(2))
    elif components == 1:
        if isinstance(exact, list):
            raise SpecError(key, "exact for a scalar integrand is one number", exact,
                            valid="one finite number")
    elif not isinstance(exact, list) or len(exact) != components:
        raise SpecError(key, f"exact needs {components} numbers", exact,
                        valid=_numbers(int(components)))


def _numbers(count: int) -> str:
    """The valid form of a list whose length the run's shape fixes."""
    return f"an array of {count} finite number{'s' if count != 1 else ''}"
