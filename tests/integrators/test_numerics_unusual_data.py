"""Numerical paths that only unusual data take: a discrete sampler that learns nothing from a
batch (all zeros, all non-finite) or learns from |g| instead of its rms, moments of a
stratified run with non-finite points, histograms alone sent between processes, an
iteration without one finite sample, the incomplete gamma function at a subnormal ``a``,
and releasing processes where none were ever loaded."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from mainboard.errors import SpecError
from mainboard.integrators.discrete import DiscreteSampler
from mainboard.integrators.domain import Domain
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.observables import (
    Observables,
    combine_observables,
    fold,
    iteration_estimates,
)
from mainboard.integrators.projection import check_projection
from mainboard.integrators.spec import parse_run
from mainboard.integrators.special import gammaq
from mainboard.integrators.stages import BatchResult, build_run, process_batch, release_processes

CHANNELS = 3


def _batch(sampler: DiscreteSampler, n: int = 600):
    batch = sampler.materialize(sampler.sample(7, 0, 0, n))
    return batch, batch.aux["channel"].astype(np.intp)


@pytest.mark.parametrize("finite", ["all", "none"])
def test_a_discrete_sampler_keeps_its_channel_probabilities_when_the_batch_says_nothing(
        finite: str) -> None:
    """A zero integrand (every |g| is 0) or a batch of non-finite values only (no channel
    was seen): the channel probabilities stay where they were; the grid still adapts."""
    sampler = DiscreteSampler(Domain(2, [CHANNELS]), bins=4)
    batch, _ = _batch(sampler)
    wf2 = np.zeros(batch.n)
    mask = None if finite == "all" else np.zeros(batch.n, dtype=bool)
    sampler.ingest(sampler.training(batch, wf2, mask))
    sampler.adapt()
    assert np.array_equal(sampler.probs, np.full(CHANNELS, 1.0 / CHANNELS))
    assert sampler.version == 1 and sampler.snapshot()["state"]["probs"].tolist() == \
        [1.0 / CHANNELS] * CHANNELS


def test_a_discrete_sampler_trained_on_abs_follows_the_mean_of_g_not_its_rms() -> None:
    """p_c ~ E_c[|g|] with ``train_on = "abs"``: a channel whose |g| is twice another's on
    average gets twice its share (before the floor), whatever the spread inside it."""
    rates = {"abs": None, "rms": None}
    for train_on in rates:
        sampler = DiscreteSampler(Domain(1, [CHANNELS]), bins=4, learning_rate=1.0,
                                  floor=0.03, train_on=train_on)
        batch, channel = _batch(sampler)
        p = sampler.probs[channel]
        # |g| per row: channel c gives c + 1 on every row, but channel 2 alternates 0 and 6
        g = np.where(channel == 2, np.where(np.arange(batch.n) % 2 == 0, 0.0, 6.0),
                     channel + 1.0)
        sampler.ingest(sampler.training(batch, (g / p) ** 2, None))
        sampler.adapt()
        rates[train_on] = sampler.probs
    mean_g = np.array([1.0, 2.0, 3.0])  # channel 2: (0 + 6) / 2 on average (counts even)
    counts = np.bincount(channel, minlength=CHANNELS)
    odd = np.count_nonzero((channel == 2) & (np.arange(len(channel)) % 2 == 1))
    mean_g[2] = 6.0 * odd / counts[2]
    want = 0.97 * mean_g / mean_g.sum() + 0.03 / CHANNELS
    np.testing.assert_allclose(rates["abs"], want, rtol=1e-12)
    assert rates["rms"][2] > rates["abs"][2]  # the rms weighs channel 2's spread


def test_moments_of_a_stratified_run_leave_its_non_finite_points_out() -> None:
    """A VEGAS+ run whose integrand is NaN in a corner: the moments' stratified errors are
    summed over the finite points only, and every number the run shows is finite."""
    result = integrate_local({
        "name": "strata-moments", "seed": 3, "domain": {"continuous": 2, "discrete": [2]},
        "integrand": {"kind": "python", "target": "tests.support.edge_targets:channel_peak"},
        "sampler": {"kind": "vegas", "bins": 8, "beta": 0.75},
        "accumulator": {"moments": 2},
        "batching": {"batch_size": 1000, "batches_per_iteration": 2},
        "stop": {"max_samples": 4000}})
    assert result.nan_count > 0
    moments = result.observables["moments"]
    assert moments["orders"] == [1, 2]
    values = np.array([moments["estimate"], moments["error"]])
    assert np.isfinite(values).all() and (values[1] > 0).all()


def test_histograms_without_moments_travel_between_processes_unchanged() -> None:
    run = build_run({
        "name": "hist-only", "seed": 2, "domain": {"continuous": 2},
        "integrand": {"kind": "genz.gaussian", "a": [2.0, 2.0], "u": [0.5, 0.5]},
        "sampler": {"kind": "naive"},
        "accumulator": {"histograms": [{"name": "x", "of": "x0", "bins": 5,
                                        "range": [0.0, 1.0]}]},
        "batching": {"batch_size": 300, "batches_per_iteration": 1},
        "stop": {"max_samples": 300}})
    result = process_batch(run, run.new_sampler(), 0, 0, 300)
    back = BatchResult.from_dict(result.to_dict())
    assert back.observables is not None and "moments" not in back.observables
    for key in ("sum", "sum2", "hits"):
        got, want = back.observables["histograms"]["x"][key], result.observables["histograms"][
            "x"][key]
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_an_iteration_without_a_finite_sample_shows_zero_plus_minus_zero() -> None:
    """Every value non-finite: the iteration's weight (its finite samples) is 0, and the
    histogram and moments read 0 +- 0 rather than 0 / 0."""
    spec = parse_run({
        "name": "all-nan", "seed": 1, "domain": {"continuous": 1},
        "integrand": {"kind": "genz.gaussian", "a": [1.0]}, "stop": {"max_samples": 10},
        "accumulator": {"moments": 1, "histograms": [{"name": "x", "of": "x0", "bins": 2,
                                                      "range": [0.0, 1.0]}]}})
    obs = Observables.build(spec.accumulator, 1, False, lambda target, key: None)
    assert obs is not None
    x = np.array([[0.2], [0.7]])
    f = np.full((2, 1), np.nan)
    sums = obs.reduce(f, np.ones(2), obs.bins(x, np.zeros((2, 0), dtype=np.int64)),
                      np.zeros(2, dtype=bool))
    totals = fold(None, iteration_estimates(sums, 0), keep=True)
    out = combine_observables(spec.accumulator, totals, 1, ["value"])
    assert out["histograms"][0]["estimate"] == [[0.0, 0.0]]
    assert out["histograms"][0]["error"] == [[0.0, 0.0]]
    assert out["moments"] == {"orders": [1], "estimate": [[0.0]], "error": [[0.0]]}


def test_gamma_q_at_a_subnormal_a_and_a_refused_nan() -> None:
    """Q(a, x) -> 0 as a -> 0: at the smallest double the series' sum overflows, its term
    bound ends it and the answer is 0, as scipy gives; NaN is no a > 0."""
    assert gammaq(5e-324, 0.5) == 0.0
    assert math.isclose(gammaq(1.0, 0.5), math.exp(-0.5), rel_tol=1e-14)
    with pytest.raises(ValueError, match=r"gammaq needs a > 0 and x >= 0, got a=nan, x=1\.0"):
        gammaq(float("nan"), 1.0)


def test_a_vector_integrand_trains_on_a_component_named_by_its_label() -> None:
    """``training_projection = "value1"`` names the second component of a vector
    integrand; ``imag`` of a real one is refused with what is valid."""
    spec = parse_run({
        "name": "proj", "seed": 1, "domain": {"continuous": 1},
        "integrand": {"kind": "python", "target": "tests.support.edge_targets:as_column",
                      "components": 2},
        "stop": {"max_samples": 10}}).integrand
    assert check_projection("value1", spec) is None
    with pytest.raises(SpecError, match=r"the integrand has no 'imag' to train on") as info:
        check_projection("imag", spec)
    assert (info.value.key, info.value.valid) == ("sampler.training_projection",
                                                  "real, abs, abs_sq, value0, value1")


def test_releasing_processes_where_none_ran_loads_no_process_machinery(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "mainboard.integrators.process.pool", raising=False)
    release_processes("no-such-run")
    assert "mainboard.integrators.process.pool" not in sys.modules
