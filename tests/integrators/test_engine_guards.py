"""The pure engine's own guards and small paths, called as a notebook would: the package's
lazy names, the run state refusing an iteration that is not its own, a task's snapshot, the
iteration callback, merges of mismatched batches, a deadline that is no string, an error
ratio without numbers, and the kernels loaded on request."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import mainboard.integrators as integrators
from mainboard.errors import MergeError, SpecError
from mainboard.integrators import driver, stages
from mainboard.integrators.driver import RunState, integrate_local, step
from mainboard.integrators.goal import error_ratio, parse_deadline
from mainboard.integrators.kernels import preload
from mainboard.integrators.special import gammaq
from mainboard.integrators.stages import build_run, merge_results, process_batch
from mainboard.integrators.stop import precision_met

RUN: dict[str, Any] = {
    "name": "edges", "seed": 5, "domain": {"continuous": 2},
    "integrand": {"kind": "genz.gaussian", "a": [2.0, 2.0], "u": [0.5, 0.5]},
    "sampler": {"kind": "vegas", "bins": 8},
    "batching": {"batch_size": 500, "batches_per_iteration": 2},
    "stop": {"max_samples": 2000}}


def test_the_package_hands_out_its_names_lazily() -> None:
    assert integrators.build_run is stages.build_run
    assert integrators.RunState is driver.RunState
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        integrators.nothing_here  # noqa: B018


def test_the_state_refuses_an_iteration_that_is_not_its_own() -> None:
    state = RunState.start(build_run(RUN))
    with pytest.raises(ValueError, match="no iteration has finished yet"):
        state.result()
    merged = step(state)
    assert merged is not None and state.iteration == 1
    with pytest.raises(ValueError, match="expected iteration 1, got 0"):
        state.apply(merged)
    later = dataclasses.replace(merged, iteration=1, sampler_version=merged.sampler_version + 7)
    with pytest.raises(ValueError, match=r"iteration used sampler version \d+, state has \d+"):
        state.apply(later)


def test_a_frozen_task_state_keeps_its_grid_and_says_so_in_its_snapshot() -> None:
    run = build_run(RUN)
    state = RunState.start(run)
    state.frozen, state.task = True, "infer"
    grid = state.sampler.snapshot()["state"]["edges"].copy()
    step(state)
    assert np.array_equal(state.sampler.snapshot()["state"]["edges"], grid)  # never adapted
    snap = state.snapshot()
    assert (snap["task"], snap["frozen"]) == ("infer", True)
    back = RunState.restore(run, snap)
    assert (back.task, back.frozen, back.samples) == ("infer", True, 1000)


def test_the_callback_sees_every_iteration_in_order() -> None:
    seen: list[tuple[int, int]] = []
    result = integrate_local(RUN, on_iteration=lambda s, m: seen.append((s.iteration,
                                                                        m.iteration)))
    assert seen == [(1, 0), (2, 1)] and result.samples == 2000


def test_merging_refuses_batches_of_different_iterations_or_grids() -> None:
    run = build_run(RUN)
    sampler = run.new_sampler()
    a = process_batch(run, sampler, 0, 0, 100)
    b = process_batch(run, sampler, 1, 1, 100)
    with pytest.raises(MergeError, match=r"several iterations: \[0, 1\]"):
        merge_results([a, b])
    c = dataclasses.replace(process_batch(run, sampler, 0, 1, 100), sampler_version=9)
    with pytest.raises(MergeError, match=r"several sampler versions"):
        merge_results([a, c])


def test_goal_helpers_refuse_or_skip_what_they_cannot_read() -> None:
    with pytest.raises(SpecError, match="must be a string"):
        parse_deadline(3600)
    stop = dataclasses.make_dataclass("Stop", ["absolute_error", "relative_error"])(0.1, None)
    assert error_ratio(stop, ["x"], [0.2]) is None
    assert error_ratio(stop, [], [0.2]) is None
    assert error_ratio(stop, 1.0, 0.2) == pytest.approx(2.0)


def test_an_infinite_chi2_has_p_value_zero_and_a_non_finite_error_meets_no_target() -> None:
    assert gammaq(2.0, float("inf")) == 0.0
    with pytest.raises(ValueError, match="gammaq needs a > 0"):
        gammaq(0.0, 1.0)
    combined = dataclasses.make_dataclass("C", ["mean", "error"])(
        np.array([1.0]), np.array([float("nan")]))
    stop = dataclasses.make_dataclass("S", ["absolute_error", "relative_error"])(1.0, None)
    assert precision_met(stop, combined, "scalar") is None


def test_kernels_load_on_request() -> None:
    first = preload()
    assert preload() is first  # loaded once; numpy stays the answer when numba is missing


def test_histograms_and_moments_of_a_discrete_run_with_a_non_finite_corner() -> None:
    """A Python observable of (x, idx) bins every finite point; the histogram's bins add up
    to the total and to the first moment; with every iteration discarded the last stands."""
    run = {"name": "obs", "seed": 2, "domain": {"continuous": 1, "discrete": [2]},
           "integrand": {"kind": "python", "target": "tests.support.edge_targets:channel_peak",
                         "params": {"scale": 2.0}},
           "sampler": {"kind": "naive"}, "stop": {"max_samples": 1600},
           "batching": {"batch_size": 400, "batches_per_iteration": 2},
           "accumulator": {"kind": "scalar", "discard": 3, "moments": 2, "histograms": [
               {"name": "h", "of": "tests.support.edge_targets:channel_and_x", "bins": 4,
                "range": [0, 2]}]}}
    result = integrate_local(run).to_dict()
    assert result["nan_count"] > 0 and result["samples"] == 1600
    observables = result["observables"]
    bins = observables["histograms"][0]
    assert sum(bins["hits"]) < 800  # the last iteration's finite points, none outside
    assert sum(bins["estimate"][0]) == pytest.approx(result["estimate"], rel=1e-12)
    assert observables["moments"]["estimate"][0][0] == pytest.approx(result["estimate"],
                                                                     rel=1e-12)
    exact = 2.0 * 3.0 * (0.5 - 0.05 ** 2 / 2)  # the corner x0 < 0.05 is left out
    assert abs(result["estimate"] - exact) < 5 * result["error"]


def test_python_integrands_in_their_other_shapes() -> None:
    from mainboard.errors import ConfigError
    from mainboard.integrators.integrands import make_integrand

    x, idx = np.full((3, 2), 0.5), np.zeros((3, 0), np.int64)
    column = make_integrand({"kind": "python", "target": "tests.support.edge_targets:as_column"}, 2)
    assert column.evaluate(x, idx).tolist() == [0.5, 0.5, 0.5]  # (n, 1) taken as (n,)
    cplx = make_integrand({"kind": "python", "target": "tests.support.edge_targets:as_column",
                           "components": "complex", "exact": [1.0, 2.0]}, 2)
    assert cplx.exact == 1 + 2j
    vector = make_integrand({"kind": "python", "target": "tests.support.edge_targets:as_column",
                             "components": 2, "exact": [1.0, 2.0]}, 2)
    assert vector.exact == [1.0, 2.0]
    with pytest.raises(ConfigError, match=r"integrand\.a: wrong type"):
        make_integrand({"kind": "genz.gaussian", "a": "x"}, 2)
    with pytest.raises(ConfigError, match=r"integrand\.a"):
        make_integrand({"kind": "genz.gaussian", "a": [1.0]}, 2)


def test_a_constant_keeps_its_exact_value_only_where_the_region_s_volume_is_known() -> None:
    """One ball of radius 1 in 2-d, scaled by 1/2: value x pi / 4; the same ball after a
    process transform (its map unknown here): no exact value."""
    import math

    from mainboard.integrators.domain import Domain
    from mainboard.integrators.spec import UnitBallSpec
    from mainboard.integrators.transforms import TransformChain

    base = {**RUN, "integrand": {"kind": "constant", "value": 2.0}}
    ball = build_run({**base, "transforms": [{"kind": "unit_ball"},
                                             {"kind": "affine", "scale": [0.5, 0.5]}]})
    assert ball.integrand.exact == pytest.approx(2.0 * math.pi / 4)
    later = build_run({**base, "transforms": [{"kind": "process", "command": ["never-run"]},
                                              {"kind": "unit_ball"}]})
    assert later.integrand.exact is None  # nothing started: processes start on first batch
    with pytest.raises(ValueError, match=r"transforms\.0\.center: center needs 2 entries"):
        TransformChain([UnitBallSpec(kind="unit_ball", center=[0.0])], Domain(2))


@pytest.mark.parametrize("dim", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("total", [0, 3, 10, 1000, 100_000, 10**9])
def test_strata_per_axis_fill_the_target_and_differ_by_at_most_one(dim: int, total: int) -> None:
    """About 2 samples of the non-adaptive share per hypercube: as many as fit, no more."""
    from mainboard.integrators.strata import ADAPTIVE_FRACTION, MAX_STRATA, strata_shape

    shape = strata_shape(total, dim)
    target = min((1.0 - ADAPTIVE_FRACTION) * total / 2.0, float(MAX_STRATA))
    assert shape.shape == (dim,) and (shape >= 1).all()
    if dim == 0:
        return
    assert shape.max() - shape.min() <= 1
    assert np.prod(shape, dtype=np.float64) <= max(target, 1.0)
    if target >= 2:  # one more stratum on the smallest axis would pass the target
        grown = shape.copy()
        grown[int(np.argmin(grown))] += 1
        assert np.prod(grown, dtype=np.float64) > target


def test_vegas_plus_plans_strata_only_when_two_fit_and_keeps_a_plan_asked_twice() -> None:
    from mainboard.integrators.domain import Domain
    from mainboard.integrators.owner import produce_iteration
    from mainboard.integrators.samplers import VegasSampler, make_sampler

    sampler = VegasSampler(Domain(2), bins=8, beta=0.75)
    sampler.plan([3])
    assert sampler.strata is None  # 3 samples: no two strata
    sampler.plan([1000, 1000])
    plan = sampler.strata
    sampler.plan([1000, 1000])
    assert plan is not None and sampler.strata is plan  # the owner asks again: same plan
    with pytest.raises(ValueError, match=r"batch 5 of 10 samples is not in the sampler's plan"):
        plan.share(5, 10)
    with pytest.raises(ValueError, match="unknown sampler kind 'sobol'; valid: discrete, "):
        make_sampler({"kind": "sobol"}, Domain(2))
    with pytest.raises(TypeError, match="a 'vegas' sampler has no owner"):
        produce_iteration(sampler, 1, 0, 100, 2)


def test_rows_that_are_each_finite_all_count_even_when_their_sum_overflows() -> None:
    from mainboard.integrators.accumulators import Partial

    with np.errstate(over="ignore"):  # the mean of such rows overflows too (numpy warns)
        part, mask = Partial.from_values(np.array([[1e308], [1e308], [1.0]]))
    assert mask is None and part.count == 3
    part, mask = Partial.from_values(np.array([[1.0], [np.inf]]))
    assert mask.tolist() == [True, False] and part.count == 1


def test_one_sample_has_no_error_estimate_and_a_bad_observable_fails_the_batch() -> None:
    from mainboard.errors import BatchError

    run = {**RUN, "sampler": {"kind": "naive"}, "stop": {"max_samples": 1},
           "batching": {"batch_size": 1, "batches_per_iteration": 1},
           "accumulator": {"kind": "scalar", "moments": 1, "histograms": [
               {"name": "h", "of": "x0", "bins": 2, "range": [0, 1]}]}}
    result = integrate_local(run).to_dict()
    assert result["error"] == float("inf")
    observables = result["observables"]
    assert observables["moments"]["error"] == [[float("inf")]]
    assert observables["histograms"][0]["error"] == [[float("inf"), float("inf")]]
    run["accumulator"]["histograms"][0]["of"] = "tests.support.run_integrands:wrong_shape"
    run["stop"], run["batching"] = {"max_samples": 10}, {"batch_size": 10}
    with pytest.raises(BatchError, match=r"histogram 'h': tests\.support\.run_integrands:wrong_shape "
                                         r"returned shape \(10, 2\), expected \(10,\)"):
        integrate_local(run)


def test_a_batch_from_user_code_is_checked_before_it_is_used() -> None:
    """What a registered sampler or transform hands back: a Batch of numpy arrays; weights
    each finite are fine even when their sum overflows."""
    from mainboard.errors import BatchError
    from mainboard.integrators.domain import Batch, Domain, validate

    domain = Domain(2)
    with pytest.raises(BatchError, match="expected a Batch, got dict"):
        validate({"x": []}, domain, "transform[0]:mine")  # type: ignore[arg-type]
    with pytest.raises(BatchError, match="x must be a numpy array, got list"):
        validate(Batch(x=[[0.5, 0.5]], idx=np.zeros((1, 0), np.int64),  # type: ignore[arg-type]
                       weights=np.ones(1)), domain, "sample")
    big = Batch(x=np.full((2, 2), 0.5), idx=np.zeros((2, 0), np.int64),
                weights=np.array([1e308, 1e308]))
    with np.errstate(over="ignore"):
        assert validate(big, domain, "sample") is big
