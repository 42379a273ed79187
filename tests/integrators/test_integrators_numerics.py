"""Accumulators, chi2/Q, the VEGAS map and error honesty, checked against scipy and vegas."""

from __future__ import annotations

import json

import gvar
import numpy as np
import pytest
import vegas
from scipy.special import gammaincc

from mainboard.integrators.accumulators import (
    IterationEstimate,
    Partial,
    RunAccumulator,
    combine,
)
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.grid import GridTables, adapt_edges, uniform_edges
from mainboard.integrators.special import gammaq


@pytest.mark.parametrize("a", [0.5, 1.0, 2.5, 7.0, 40.0, 500.0])
def test_gammaq_matches_scipy(a: float) -> None:
    for x in [0.0, 1e-6, 0.2, 1.0, a, 3 * a + 5, 10 * a + 50]:
        assert gammaq(a, x) == pytest.approx(gammaincc(a, x), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("a", [1e5, 1e6, 1e7, 1e10, 1e12])
def test_gammaq_stays_right_for_huge_a(a: float) -> None:
    """Near x = a the series needs about sqrt(a) terms a digit: past 1e6 it was cut short
    (0.96 for a = 1e10, x = a - 1, where scipy says 0.5)."""
    for x in [0.9 * a, a - 3 * a ** 0.5, a - 1, a, a + a ** 0.5, 1.01 * a, 1.1 * a]:
        assert gammaq(a, x) == pytest.approx(gammaincc(a, x), abs=1e-8)


def test_gammaq_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="a > 0"):
        gammaq(0.0, 1.0)


def test_combine_matches_vegas_ravg() -> None:
    rng = np.random.default_rng(5)
    means = 1.0 + 0.01 * rng.standard_normal(7)
    sdevs = 0.01 * (0.5 + rng.random(7))
    ravg = vegas.RAvg()
    estimates = []
    for k, (m, s) in enumerate(zip(means, sdevs, strict=True)):
        ravg.add(gvar.gvar(m, s))
        estimates.append(IterationEstimate(k, np.array([m]), np.array([s * s]), 100, 0))
        ours = combine(estimates)
        assert ours.mean[0] == pytest.approx(ravg.mean, rel=1e-13)
        assert ours.error[0] == pytest.approx(ravg.sdev, rel=1e-13)
        assert ours.dof == ravg.dof
        assert ours.chi2[0] == pytest.approx(ravg.chi2, rel=1e-10, abs=1e-15)
        if k > 0:
            # gvar.gammaQ is only good to ~1e-6; scipy is the precise reference.
            assert ours.q[0] == pytest.approx(ravg.Q, rel=1e-5)
            assert ours.q[0] == pytest.approx(gammaincc(k / 2, ravg.chi2 / 2), rel=1e-10)
            assert ours.chi2_dof == pytest.approx(ravg.chi2 / ravg.dof, rel=1e-10)


def test_partial_merge_equals_one_pass_in_any_grouping() -> None:
    rng = np.random.default_rng(2)
    values = rng.standard_normal((1000, 2)) * [1.0, 1e-3] + [1e6, 5.0]
    whole, _ = Partial.from_values(values)
    merged = Partial.empty(2)
    for chunk in np.array_split(values, [10, 11, 400, 999]):
        merged = merged.merge(Partial.from_values(chunk)[0])
    assert merged.count == whole.count == 1000
    np.testing.assert_allclose(merged.mean, values.mean(axis=0), rtol=1e-15)
    np.testing.assert_allclose(merged.variance_of_mean(),
                               values.var(axis=0, ddof=1) / 1000, rtol=1e-9)


def test_nonfinite_values_are_counted_not_averaged() -> None:
    values = np.array([[1.0], [np.nan], [3.0], [np.inf], [5.0]])
    partial, finite = Partial.from_values(values)
    assert partial.samples == 5 and partial.count == 3 and partial.nonfinite == 2
    assert partial.mean[0] == 3.0
    assert finite is not None and finite.tolist() == [True, False, True, False, True]
    everything_bad, _ = Partial.from_values(np.full((4, 1), np.nan))
    assert everything_bad.count == 0 and everything_bad.nonfinite == 4
    assert np.isinf(everything_bad.variance_of_mean()).all()


def test_accumulator_discard_and_snapshot() -> None:
    acc = RunAccumulator("scalar", 1, discard=2)
    for k, m in enumerate([5.0, 1.1, 1.0, 1.02]):
        acc.add(IterationEstimate(k, np.array([m]), np.array([0.01]), 10, k))
    assert acc.result().mean[0] == pytest.approx(1.01)
    assert acc.samples == 40 and acc.nonfinite == 6
    again = RunAccumulator.restore(json.loads(json.dumps(acc.snapshot())))
    assert again.result().mean[0] == acc.result().mean[0]
    assert again.result().error[0] == acc.result().error[0]
    with pytest.raises(ValueError, match="components"):
        acc.add(IterationEstimate(9, np.array([1.0, 2.0]), np.array([1.0, 1.0]), 1, 0))


def test_grid_map_and_adaptation_match_vegas_adaptive_map() -> None:
    rng = np.random.default_rng(3)
    d, bins = 3, 20
    edges = uniform_edges(1, d, bins)
    edges[0, :, 1:-1] = np.sort(rng.random((d, bins - 1)), axis=-1)
    reference = vegas.AdaptiveMap(edges[0].tolist())
    tables = GridTables(edges)
    y = rng.random((4000, d))
    x, jac, bin_numbers = tables.map(np.ascontiguousarray(y.T))
    x_ref, jac_ref = np.empty_like(y), np.empty(len(y))
    reference.map(y, x_ref, jac_ref)
    np.testing.assert_allclose(x.T, x_ref, rtol=0, atol=1e-15)
    np.testing.assert_allclose(jac, jac_ref, rtol=1e-14)
    f2 = (jac * np.exp(-20 * ((x.T - 0.3) ** 2).sum(axis=1))) ** 2
    reference.add_training_data(y, f2)
    reference.adapt(alpha=0.7)
    sums, counts = tables.training(bin_numbers, None, f2, None)
    np.testing.assert_allclose(adapt_edges(edges, sums, counts, 0.7)[0],
                               np.asarray(reference.grid), rtol=0, atol=1e-14)


def _cheap(seed: int, sampler: dict, a: float = 4.0, d: int = 2, n: int = 2000,
           iterations: int = 4) -> object:
    return integrate_local({
        "name": "cheap", "seed": seed, "domain": {"continuous": d},
        "integrand": {"kind": "genz.gaussian", "a": [a] * d, "u": [0.45] * d},
        "sampler": sampler, "accumulator": {"discard": 1},
        "stop": {"max_iterations": iterations},
        "batching": {"batch_size": n, "batches_per_iteration": 1}})


def test_errors_are_honest_over_fifty_runs() -> None:
    inside = 0
    for seed in range(50):
        r = _cheap(seed, {"kind": "vegas", "bins": 16})
        inside += abs(r.estimate - r.exact) <= r.error
    assert 0.55 <= inside / 50 <= 0.80, inside


def test_vegas_beats_naive_on_a_peaked_integrand() -> None:
    vegas_run = _cheap(1, {"kind": "vegas", "bins": 32}, a=12.0, d=4, n=10_000, iterations=6)
    naive_run = _cheap(1, {"kind": "naive"}, a=12.0, d=4, n=10_000, iterations=6)
    assert vegas_run.samples == naive_run.samples == 60_000
    assert vegas_run.error * 5 < naive_run.error
    for r in (vegas_run, naive_run):
        assert abs(r.estimate - r.exact) < 4 * r.error
