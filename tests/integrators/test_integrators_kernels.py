"""The compiled VEGAS map (stratified and classic) and training sums (integrators/kernels.py)
against their numpy twins.

A kernel must give the numpy path's numbers to the last bit (a fleet may mix hosts with
and without numba, a process switches mid-run), including the rare sum that rounds up to
the bin count; a process loads it once numpy has drawn its share of rows; small batches,
``MAINBOARD_KERNELS=0`` and a numba that does not import keep to numpy. numba is a declared
dependency: a kernel that does not load here is a failure, not a skip.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mainboard.errors import BatchError
from mainboard.integrators import genz, kernels, stages
from mainboard.integrators.driver import RunState, integrate_local, step
from mainboard.integrators.grid import ONE_BELOW, GridTables
from mainboard.integrators.stages import build_run
from mainboard.integrators.strata import StrataPlan, StratifiedFill, run_starts

SPEC = {"name": "kernel", "seed": 11, "domain": {"continuous": 5, "discrete": [3]},
        "integrand": {"kind": "genz.gaussian", "a": [4.0] * 5, "u": [0.4] * 5},
        "sampler": {"kind": "vegas", "bins": 12, "alpha": 0.7, "beta": 0.75},
        "stop": {"max_samples": 4 * 2 * 9000},
        "batching": {"batch_size": 9000, "batches_per_iteration": 2}}


@pytest.fixture
def small_kernel_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels for every batch from the first, so the tests stay small (9,000-row batches:
    two slices)."""
    monkeypatch.setattr(kernels, "KERNEL_ROWS", 1)
    monkeypatch.setattr(kernels, "LOAD_AFTER_ROWS", 0)


def _batches(monkeypatch: pytest.MonkeyPatch, switch: str) -> list:
    monkeypatch.setenv(kernels.ENV, switch)
    run = build_run(SPEC)
    state = RunState.start(run)
    step(state)  # a learned, uneven allocation: runs of many lengths cross the slice edge
    sizes = state.next_batches()
    smp = state.sampler
    assert smp.strata is not None
    return [smp.materialize(smp.sample(run.spec.seed, state.iteration, b, n))
            for b, n in enumerate(sizes)]


def test_kernel_draws_the_numpy_batch_to_the_last_bit(
        monkeypatch: pytest.MonkeyPatch, small_kernel_rows: None) -> None:
    numpy_side = _batches(monkeypatch, "0")
    kernel_side = _batches(monkeypatch, "1")
    assert kernels.preload(), "numba did not load"
    for a, b in zip(numpy_side, kernel_side, strict=True):
        for got, want in ((b.x, a.x), (b.weights, a.weights), (b.idx, a.idx),
                          (b.aux["bins"], a.aux["bins"]),
                          (b.aux["stratum_factor"], a.aux["stratum_factor"])):
            assert got.dtype == want.dtype and np.array_equal(got, want)


class _Draws:
    """A stand-in generator whose "uniforms" are chosen: the largest double below 1 (the
    sum that rounds up to N), 0 and a few ordinary values."""

    def random(self, out: np.ndarray) -> None:
        pattern = np.array([ONE_BELOW, 0.0, 0.5, 0.999, 0.25, ONE_BELOW, 1e-17])
        out[...] = np.resize(pattern, out.size).reshape(out.shape)


def test_kernel_puts_a_sum_that_rounds_up_to_the_bin_count_in_the_last_bin() -> None:
    nstrat, bins = np.array([2, 2]), 64  # step 32: ONE_BELOW * 32 + 32 rounds to 64
    tables = GridTables(np.sort(np.random.default_rng(2).random((1, 2, bins + 1)), axis=-1))
    plan = StrataPlan.build(nstrat, [90], None)
    first, local = plan.share(0, 90)
    corners, step_ = StrataPlan.corners_of(nstrat, bins), bins / nstrat
    scaled = np.empty((2, 90))
    StratifiedFill(corners, nstrat, step_, first, local)(_Draws(), scaled, slice(0, 90), None)
    assert (scaled == bins).any()  # the sum that rounds up to N happens in this draw
    x, jac, got_bins = tables.draw(_Draws(), 90, into=StratifiedFill(corners, nstrat, step_,
                                                                first, local))
    jac = jac * np.repeat(plan.factors[first:first + local.size], local)
    assert kernels.preload(), "numba did not load"
    kernel = kernels.stratified_kernel(10 ** 6)
    assert kernel is not None
    starts = run_starts(local)
    kx, kjac, kbins, _, inside = kernels.stratified_draw(
        kernel, _Draws(), 90, tables, step_, corners[:, first:first + local.size], starts,
        plan.factors[first:first + local.size])
    assert (got_bins == bins - 1).any()  # the clamp happened
    assert inside  # the tables are finite and >= 0
    assert np.array_equal(kx, x) and np.array_equal(kjac, jac)
    assert np.array_equal(kbins, got_bins)


def test_a_run_gives_the_same_result_with_and_without_kernels(
        monkeypatch: pytest.MonkeyPatch, small_kernel_rows: None) -> None:
    results = []
    for switch in ("0", "1"):
        monkeypatch.setenv(kernels.ENV, switch)
        r = integrate_local(SPEC)
        results.append((float(r.estimate).hex(), float(r.error).hex(), r.samples))
    assert results[0] == results[1]


def test_a_process_loads_the_kernel_once_numpy_has_drawn_its_share(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_LOADED", {})
    monkeypatch.setattr(kernels, "_DRAWN", {"stratified": 0})
    monkeypatch.setattr(kernels, "LOAD_AFTER_ROWS", 3 * kernels.KERNEL_ROWS)
    rows = kernels.KERNEL_ROWS
    assert kernels.stratified_kernel(rows - 1) is None  # small: numpy, not counted
    assert [kernels.stratified_kernel(rows) is None for _ in range(4)] == [True] * 3 + [False]
    assert kernels._DRAWN["stratified"] == 3 * rows
    assert kernels.stratified_kernel(rows - 1) is None  # small batches stay on numpy


def test_switched_off_kernels_and_a_missing_numba_keep_to_numpy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "LOAD_AFTER_ROWS", 0)
    monkeypatch.setenv(kernels.ENV, "0")
    assert kernels.stratified_kernel(10 ** 6) is None
    assert kernels.training_kernel(10 ** 6) is None
    monkeypatch.setenv(kernels.ENV, "1")
    monkeypatch.setattr(kernels, "KERNEL_ROWS", 1)
    classic = {**SPEC, "sampler": {**SPEC["sampler"], "beta": 0.0}}
    assert kernels.preload()
    with_kernels = [integrate_local(s) for s in (SPEC, classic)]
    monkeypatch.setattr(kernels, "KERNEL_ROWS", 16384)
    monkeypatch.setattr(kernels, "_LOADED", {})
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba -> ImportError
    monkeypatch.delitem(sys.modules, "mainboard.integrators.grid_kernel",
                        raising=False)
    assert not kernels.preload() and kernels.stratified_kernel(10 ** 6) is None
    assert kernels.training_kernel(10 ** 6) is None
    monkeypatch.setattr(kernels, "KERNEL_ROWS", 1)
    for spec, want in zip((SPEC, classic), with_kernels, strict=True):
        got = integrate_local(spec)  # numpy throughout: the same numbers
        assert (float(got.estimate), float(got.error)) == (float(want.estimate),
                                                           float(want.error))
    run = build_run(SPEC)
    state = RunState.start(run)
    sizes = state.next_batches()
    batch = state.sampler.materialize(state.sampler.sample(run.spec.seed, 0, 0, sizes[0]))
    assert batch.n == sizes[0] and "stratum_factor" in batch.aux


def _random_tables(seed: int, dim: int, bins: int) -> GridTables:
    """A trained-looking grid: uneven sorted edges from 0 to 1 per axis."""
    inner = np.sort(np.random.default_rng(seed).random((1, dim, bins - 1)), axis=-1)
    zeros, ones = np.zeros((1, dim, 1)), np.ones((1, dim, 1))
    return GridTables(np.concatenate([zeros, inner, ones], axis=-1))


@pytest.mark.parametrize(("seed", "dim", "bins", "n"),
                         [(0, 1, 7, 20000), (1, 3, 64, 8192 * 3 + 5), (2, 8, 64, 30001),
                          (3, 8, 300, 17000)])
def test_classic_draw_and_training_match_numpy_to_the_last_bit(
        seed: int, dim: int, bins: int, n: int) -> None:
    assert kernels.preload(), "numba did not load"
    tables = _random_tables(seed, dim, bins)
    x, jac, got_bins = tables.draw(np.random.default_rng(seed), n)
    kx, kjac, kbins, inside = kernels.classic_draw(kernels._LOADED["stratified"],
                                                   np.random.default_rng(seed), n, tables)
    assert inside
    for got, want in ((kx, x), (kjac, jac), (kbins, got_bins)):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    f2 = np.random.default_rng(seed + 10).random(n) ** 4 * 1e3
    mask = np.random.default_rng(seed + 20).random(n) > 0.01
    scale = np.random.default_rng(seed + 30).random(n) * 3.0 + 0.1  # stratum factors
    for keep, factors in ((None, None), (mask, None), (None, scale), (mask, scale)):
        unscaled = f2 if factors is None else f2 / np.square(factors)  # the sampler's way
        want_sums, want_counts = tables.training(got_bins, None, unscaled, keep)
        sums, counts = kernels.grid_training(kernels._LOADED["training"], tables, got_bins,
                                             f2, keep, factors)
        assert sums.shape == want_sums.shape and counts.dtype == want_counts.dtype
        assert np.array_equal(sums, want_sums) and np.array_equal(counts, want_counts)


@pytest.mark.parametrize(("seed", "dim"), [(4, 2), (5, 6), (6, 8)])
def test_stratified_draw_matches_numpy_on_other_seeds_and_dimensions(seed: int, dim: int
                                                                      ) -> None:
    assert kernels.preload(), "numba did not load"
    tables, n = _random_tables(seed, dim, 64), 40000
    nstrat = np.full(dim, 3 if dim > 2 else 40)
    sigf = np.random.default_rng(seed).random(int(np.prod(nstrat)))
    plan = StrataPlan.build(nstrat, [n, n], sigf)  # uneven runs, crossing slice edges
    first, local = plan.share(1, n)
    corners, step_ = StrataPlan.corners_of(nstrat, 64), 64 / nstrat
    x, jac, got_bins = tables.draw(np.random.default_rng(seed), n,
                                   into=StratifiedFill(corners, nstrat, step_, first, local))
    factors = plan.factors[first:first + local.size]
    jac *= np.repeat(factors, local)
    kx, kjac, kbins, scale, inside = kernels.stratified_draw(
        kernels._LOADED["stratified"], np.random.default_rng(seed), n, tables, step_,
        corners[:, first:first + local.size], run_starts(local), factors)
    assert inside
    assert np.array_equal(kx, x) and np.array_equal(kjac, jac)
    assert np.array_equal(kbins, got_bins) and np.array_equal(scale, np.repeat(factors, local))


@pytest.mark.parametrize("beta", [0.0, 0.75])
def test_a_run_with_a_mask_gives_the_same_result_with_and_without_kernels(
        monkeypatch: pytest.MonkeyPatch, small_kernel_rows: None, beta: float) -> None:
    """Classic and stratified, with non-finite values (the training mask): the run's
    numbers and its sampler's learned grid are the same either way."""
    spec = {**SPEC, "domain": {"continuous": 5},
            "integrand": {"kind": "python", "target": "tests.support.run_integrands:holed_gauss"},
            "sampler": {**SPEC["sampler"], "beta": beta}}
    results = []
    for switch in ("0", "1"):
        monkeypatch.setenv(kernels.ENV, switch)
        r = integrate_local(spec)
        assert r.nan_count > 0  # the mask was used
        results.append((float(r.estimate).hex(), float(r.error).hex(), r.samples))
    assert results[0] == results[1]


@pytest.mark.parametrize("beta", [0.0, 0.75])
def test_the_compiled_map_checks_its_tables_for_the_cube_and_a_bad_grid_fails_as_on_numpy(
        monkeypatch: pytest.MonkeyPatch, small_kernel_rows: None, beta: float) -> None:
    """The compiled map's tables are checked (finite, >= 0: every point lands in [0, 1)),
    so the materialize stage skips its own pass over the points (``Batch.in_cube``); a grid
    with an edge below 0 (a damaged snapshot) still fails the batch, with numpy's message."""
    run = build_run({**SPEC, "domain": {"continuous": 5}, "sampler": {**SPEC["sampler"],
                                                                      "beta": beta}})
    assert kernels.preload(), "numba did not load"
    messages = []
    for switch in ("0", "1"):
        monkeypatch.setenv(kernels.ENV, switch)
        sampler = run.new_sampler()
        sampler.plan([9000, 9000])
        good = stages.materialize(run, sampler, sampler.sample(11, 0, 1, 9000))
        assert good.in_cube is (switch == "1")
        edges = sampler.tables.edges.copy()
        edges[0, 2, 0] = -0.25  # axis 2's first bin starts below the cube
        sampler.tables = GridTables(edges)
        with pytest.raises(BatchError) as caught:
            stages.materialize(run, sampler, sampler.sample(11, 0, 1, 9000))
        messages.append(str(caught.value))
    assert "outside the unit cube" in messages[0] and messages[0] == messages[1]
    tables, step, corners = _random_tables(1, 2, 8), np.full(2, 4.0), np.zeros((2, 1))
    assert kernels.maps_into_cube(tables, step, corners)
    assert not kernels.maps_into_cube(tables, np.array([4.0, np.nan]), corners)
    assert not kernels.maps_into_cube(tables, step, np.array([[0.0], [-1.0]]))


@pytest.mark.parametrize("kind", sorted(genz.COLUMN_SUMS))
@pytest.mark.parametrize("dim", [1, 2, 5, 8, 9])
def test_the_compiled_genz_sums_give_numpys_values_to_the_last_bit(kind: str, dim: int) -> None:
    """Points by column (x.T C-contiguous, as the VEGAS map leaves them), slices that start
    anywhere; coefficients of both signs and zero, coordinates of exact zeros and of every
    magnitude, so both the order of additions and the sign of a zero sum show."""
    assert kernels.preload(), "numba did not load"
    rng = np.random.default_rng(dim)
    cols = rng.random((dim, 20000)) * 10.0 ** rng.integers(-6, 3, (dim, 1))
    cols[:, ::97] = 0.0
    a = rng.normal(size=dim) * 3.0
    a[0] = -0.0 if dim > 1 else a[0]
    u = rng.random(dim)
    values = kernels.column_values(kind, a, u)
    assert values is not None
    fn = genz.FAMILIES[kind][0]
    x = cols.T
    for lo, hi in ((0, 8192), (8192, 16384), (16384, 20000), (5, 6), (123, 4321)):
        want, got = fn(x[lo:hi], a, u), values(cols, lo, hi)
        assert got is not None and got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(np.int64), want.view(np.int64))  # bits, signs of zero


def test_the_compiled_genz_sums_wait_for_the_kernels_and_leave_other_layouts_to_numpy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = build_run(SPEC)
    assert run.integrand.columns is not None
    cols = np.random.default_rng(3).random((5, 100))
    idx = np.zeros((100, 1), dtype=np.int64)
    want = run.integrand.evaluate(cols.T[10:60], idx[10:60])
    assert kernels.preload()
    got = run.integrand.evaluate_rows(cols.T, idx, slice(10, 60), cols)  # the batch's way
    assert np.array_equal(got.view(np.int64), want.view(np.int64))
    monkeypatch.setattr(kernels, "_LOADED", {})
    assert run.integrand.columns(cols, 0, 100) is None  # not loaded: numpy
    assert kernels.preload()
    monkeypatch.setenv(kernels.ENV, "0")
    assert run.integrand.columns(cols, 0, 100) is None  # switched off: numpy
    monkeypatch.setenv(kernels.ENV, "1")
    assert run.integrand.columns(cols, 0, 100) is not None
    assert kernels.column_values("genz.product_peak", np.ones(2), np.ones(2)) is None
