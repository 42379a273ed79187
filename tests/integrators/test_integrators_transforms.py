"""Transforms: the Jacobians integrate known functions over balls and spheres exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mainboard.errors import BatchError
from mainboard.integrators.domain import Batch, Domain
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.spec import AffineSpec, UnitBallSpec
from mainboard.integrators.transforms import TransformChain, direction


def ball_volume(d: int, r: float = 1.0) -> float:
    return math.pi ** (d / 2) / math.gamma(d / 2 + 1) * r ** d


def sphere_area(d: int, r: float = 1.0) -> float:
    """Area of the sphere S^(d-1) in R^d."""
    return 2 * math.pi ** (d / 2) / math.gamma(d / 2) * r ** (d - 1)


def radius_squared(x: np.ndarray) -> np.ndarray:
    """|x|^2, used as a python integrand below."""
    return (x * x).sum(axis=1)


def first_squared(x: np.ndarray) -> np.ndarray:
    """x_1^2."""
    return x[:, 0] ** 2


def _run(d: int, transforms: list[dict], integrand: dict, n: int = 20_000) -> object:
    return integrate_local({
        "name": "t", "seed": 3, "domain": {"continuous": d}, "integrand": integrand,
        "sampler": {"kind": "vegas", "bins": 16}, "transforms": transforms,
        "stop": {"max_iterations": 5}, "batching": {"batch_size": n, "batches_per_iteration": 1}})


@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_unit_ball_volume_and_second_moment(d: int) -> None:
    volume = _run(d, [{"kind": "unit_ball", "radius": 1.5}], {"kind": "constant"})
    assert abs(volume.estimate - ball_volume(d, 1.5)) < 4 * volume.error + 1e-12
    target = f"{__name__}:radius_squared"
    moment = _run(d, [{"kind": "unit_ball", "radius": 1.5}],
                  {"kind": "python", "target": target})
    want = ball_volume(d, 1.5) * 1.5 ** 2 * d / (d + 2)
    assert abs(moment.estimate - want) < 4 * moment.error


def test_unit_ball_radial_jacobian_is_constant() -> None:
    """With r = R y^(1/d) the radial factor is R^d / d, so |x| is uniform in volume: no variance
    from the radius, and a circle's area comes out exact."""
    area = _run(2, [{"kind": "unit_ball"}], {"kind": "constant"}, n=1000)
    assert area.estimate == pytest.approx(math.pi, rel=1e-13)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_sphere_area_and_moment(d: int) -> None:
    area = _run(d - 1, [{"kind": "spherical", "radius": 2.0}], {"kind": "constant"})
    assert abs(area.estimate - sphere_area(d, 2.0)) < 4 * area.error + 1e-9
    target = f"{__name__}:first_squared"
    moment = _run(d - 1, [{"kind": "spherical", "radius": 2.0}],
                  {"kind": "python", "target": target})
    want = sphere_area(d, 2.0) * 4.0 / d
    assert abs(moment.estimate - want) < 4 * moment.error


def test_direction_gives_unit_vectors() -> None:
    y = np.random.default_rng(0).random((1000, 3))
    unit, jac = direction(y)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-14)
    assert (jac >= 0).all()


def test_ball_then_affine_composes() -> None:
    """An ellipsoid: ball of radius 1, stretched by (2, 3, 0.5) and shifted."""
    chain = [{"kind": "unit_ball"}, {"kind": "affine", "scale": [2.0, 3.0, 0.5],
                                     "shift": [10.0, -4.0, 1.0]}]
    r = _run(3, chain, {"kind": "constant"})
    assert abs(r.estimate - ball_volume(3) * 3.0) < 4 * r.error


def test_transform_chain_names_the_stage_that_broke() -> None:
    domain = Domain(2)
    chain = TransformChain([UnitBallSpec(kind="unit_ball", center=[0.0, 0.0]),
                            AffineSpec(kind="affine", scale=[1e300, 1e300])], domain)
    batch = Batch(x=np.full((4, 2), 0.5), idx=np.zeros((4, 0), np.int64), weights=np.ones(4))
    with pytest.raises(BatchError) as info:
        chain.apply(batch)
    assert info.value.stage == "transform[1]:affine"
    assert "not finite" in str(info.value)
