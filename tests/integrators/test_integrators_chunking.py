"""Slice-wise batch processing: same numbers as whole-batch numpy (to rounding), the same bits
on every repetition, and the same merged iteration however batches are split across workers.

Batches here span several slices (plus a ragged last one) so every slice loop really loops.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from mainboard.integrators import chunking, genz
from mainboard.integrators.domain import Batch
from mainboard.integrators.grid import GridTables, uniform_edges
from mainboard.integrators.stages import (
    BatchResult,
    IterationResult,
    Run,
    build_run,
    evaluate,
    materialize,
    merge_results,
    process_batch,
    sample,
    transform,
)
from mainboard.tasks.codec import dumps, loads
from mainboard.tasks.stages import pack_batch, unpack_batch

ROWS = chunking.SLICE_ROWS
N = 3 * ROWS + 123  # three full slices and a ragged one
GAUSS_8D: dict[str, Any] = {
    "name": "chunk-8d", "seed": 5, "domain": {"continuous": 8},
    "integrand": {"kind": "genz.gaussian", "a": [5.0] * 8, "u": [0.5] * 8},
    "sampler": {"kind": "vegas", "bins": 64, "alpha": 0.5}, "stop": {"max_samples": 8 * N},
    "batching": {"batch_size": N, "batches_per_iteration": 4}}
DISCRETE = {**GAUSS_8D, "name": "chunk-discrete", "domain": {"continuous": 3, "discrete": [3, 2]},
            "integrand": {"kind": "channels", "coefficients": [1, 2, 3, 4, 5, 6],
                          "sigma": 0.2, "u": [0.4] * 3},
            "sampler": {"kind": "discrete", "bins": 16, "grids": "per_channel"}}
CALLS: list[int] = []


def recording_gauss(x: np.ndarray) -> np.ndarray:
    """A user integrand (kind = "python") that records how many rows each call got."""
    CALLS.append(x.shape[0])
    return genz.gaussian(x, np.full(x.shape[1], 3.0), np.full(x.shape[1], 0.5))


def nan_every_1000(x: np.ndarray) -> np.ndarray:
    """Gaussian values with NaN in rows 999, 1999, ... (spread over every slice)."""
    out = recording_gauss(x)
    out[999::1000] = np.nan
    return out


def trained_run(spec: dict[str, Any]) -> tuple[Run, Any]:
    """The run and a sampler adapted once, so grids are no longer uniform."""
    run = build_run(spec)
    sampler = run.new_sampler()
    first = merge_results([process_batch(run, sampler, 0, i, N) for i in range(2)])
    sampler.ingest(first.training)
    sampler.adapt()
    return run, sampler


def bits(result: BatchResult | IterationResult) -> dict[str, bytes]:
    """Every number of a result as raw bytes, for bit-for-bit comparisons."""
    p = result.partial
    out = {"partial": np.array([p.samples, p.count, p.nonfinite]).tobytes() + p.mean.tobytes()
           + p.m2.tobytes()}
    out.update({k: v.tobytes() for k, v in sorted(result.training.items())})
    return out


def whole_batch_reference(run: Run, sampler: Any, batch: Batch) -> dict[str, np.ndarray]:
    """The textbook computation on the whole batch at once (no slices)."""
    values = run.integrand.fn(batch.x, batch.idx)
    wf = values * batch.weights
    ok = np.isfinite(wf)
    used = wf[ok]
    f2 = np.where(ok, wf * wf, 0.0)
    bins = batch.aux["bins"].T[:, ok]
    tables = sampler.tables
    k = (bins + tables.offsets).ravel()
    if tables.groups > 1:  # per-channel grids learn |f J|^2, without the channel's 1/p
        f2 *= sampler.probs[batch.aux["channel"]] ** 2
        k += np.tile(batch.aux["channel"][ok].astype(np.intp) * tables.dim * tables.bins,
                     tables.dim)
    size = tables.lower.size
    return {"mean": used.mean(), "m2": ((used - used.mean()) ** 2).sum(), "count": ok.sum(),
            "f2": f2, "grid_sum": np.bincount(k, np.tile(f2[ok], tables.dim), size),
            "grid_count": np.bincount(k, minlength=size)}


def test_row_slices_are_fixed_by_the_constant_alone() -> None:
    for n in (1, ROWS - 1, ROWS, ROWS + 1, N):
        slices = chunking.row_slices(n)
        assert slices[0].start == 0 and slices[-1].stop == n
        assert all(a.stop == b.start for a, b in zip(slices, slices[1:], strict=False))
        assert all(s.start % ROWS == 0 and 0 < s.stop - s.start <= ROWS for s in slices)
    assert len(chunking.row_slices(N)) == 4


@pytest.mark.parametrize("spec", [GAUSS_8D, DISCRETE], ids=["vegas", "discrete-per-channel"])
def test_sliced_sums_match_whole_batch_numpy_to_rounding(spec: dict[str, Any]) -> None:
    run, sampler = trained_run(spec)
    batch = materialize(run, sampler, sample(run, sampler, 1, 0, N))
    got = evaluate(run, sampler, sample(run, sampler, 1, 0, N), batch)
    ref = whole_batch_reference(run, sampler, batch)
    p = got.partial
    assert (p.samples, p.count, p.nonfinite) == (N, ref["count"], 0)
    np.testing.assert_allclose(p.mean[0], ref["mean"], rtol=1e-13)
    np.testing.assert_allclose(p.m2[0], ref["m2"], rtol=1e-12)
    np.testing.assert_allclose(got.training["grid_sum"].ravel(), ref["grid_sum"], rtol=1e-12)
    np.testing.assert_array_equal(got.training["grid_count"].ravel(), ref["grid_count"])
    assert got.training["grid_count"].sum() == N * run.domain.continuous


def test_materialize_is_elementwise_so_slicing_changes_no_bit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """map() of the same uniforms gives identical points, Jacobians and bins for any slice
    size; draw() is map() of the uniforms it drew slice by slice; y is left untouched."""
    rng = np.random.default_rng(4)
    edges = uniform_edges(2, 5, 24)
    edges[:, :, 1:-1] = np.sort(rng.random((2, 5, 23)), axis=-1)
    tables = GridTables(edges)
    y = rng.random((5, N))
    y_before = y.copy()
    group = rng.integers(0, 2, N)
    sliced = tables.map(y, group)
    monkeypatch.setattr(chunking, "SLICE_ROWS", 10 * N)
    whole = tables.map(y, group)
    for a, b in zip(sliced, whole, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(y, y_before)
    monkeypatch.undo()
    drawn = tables.draw(np.random.default_rng(9), N)
    blocks = np.random.default_rng(9)
    uniforms = np.concatenate([blocks.random((5, s.stop - s.start))
                               for s in chunking.row_slices(N)], axis=1)
    for a, b in zip(drawn, tables.map(uniforms), strict=True):
        np.testing.assert_array_equal(a, b)
    for bad in (1.0, -0.5, np.nan):
        y[2, ROWS + 7] = bad
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            tables.map(y)


def test_evaluate_is_bit_identical_across_repeats_and_transports() -> None:
    """Fused, chained through the binary codec, and a restored sampler: the same bytes."""
    run, sampler = trained_run(GAUSS_8D)
    fused = [bits(process_batch(run, sampler, 1, 3, N)) for _ in range(3)]
    assert fused[0] == fused[1] == fused[2]
    snapshot = loads(dumps(sampler.snapshot()))
    latent = sample(run, snapshot, 1, 3, N)
    wire = unpack_batch(loads(dumps(pack_batch(transform(run, materialize(run, snapshot,
                                                                             latent))))))
    assert bits(evaluate(run, snapshot, latent, wire)) == fused[0]


def _split(run: Run, sampler: Any, workers: int, order: Callable[[list[int]], None]
           ) -> dict[str, bytes]:
    """One iteration of 4 batches on ``workers`` threads, batches handed out in ``order``."""
    indices = list(range(4))
    order(indices)
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda i: process_batch(run, sampler, 1, i, N), indices))
    return bits(merge_results(results, expected=4))


@pytest.mark.parametrize("spec", [GAUSS_8D, DISCRETE], ids=["vegas", "discrete-per-channel"])
def test_merged_iteration_is_identical_for_any_split_across_workers(spec: dict[str, Any]
                                                                    ) -> None:
    run, sampler = trained_run(spec)
    reference = _split(run, sampler, 1, lambda ix: None)
    shuffle = random.Random(3).shuffle
    for workers in (2, 4):
        assert _split(run, sampler, workers, shuffle) == reference
        assert _split(run, sampler, workers, list.reverse) == reference


def test_user_integrands_get_the_whole_batch_and_non_finite_rows_are_kept_out() -> None:
    spec = {**GAUSS_8D, "integrand": {"kind": "python",
                                      "target": f"{__name__}:nan_every_1000"}}
    run, sampler = trained_run(spec)
    CALLS.clear()
    latent = sample(run, sampler, 1, 0, N)
    batch = materialize(run, sampler, latent)
    got = evaluate(run, sampler, latent, batch)
    assert CALLS == [N]  # one call with every row, not one per slice
    bad = N // 1000
    assert (got.partial.nonfinite, got.partial.count) == (bad, N - bad)
    assert got.nonfinite_example == batch.x[999].tolist()
    ref = whole_batch_reference(run, sampler, batch)
    np.testing.assert_allclose(got.partial.mean[0], ref["mean"], rtol=1e-13)
    np.testing.assert_allclose(got.training["grid_sum"].ravel(), ref["grid_sum"], rtol=1e-12)
    assert got.training["grid_count"].sum() == (N - bad) * run.domain.continuous


@pytest.mark.parametrize("name", sorted(genz.FAMILIES))
@pytest.mark.parametrize("order", ["C", "F"])
def test_genz_in_place_forms_equal_the_textbook_expressions(name: str, order: str) -> None:
    """Same bits as the formulas written out, and the caller's points are left untouched."""
    rng = np.random.default_rng(1)
    x = np.asarray(rng.random((1000, 6)), order=order)
    a, u = rng.random(6) * 4 + 0.5, rng.random(6)
    x_before = x.copy()
    lin = (x * a).sum(axis=1)
    textbook = {
        "genz.oscillatory": lambda: np.cos(2.0 * np.pi * u[0] + lin),
        "genz.product_peak": lambda: np.prod(1.0 / (a ** -2.0 + (x - u) ** 2), axis=1),
        "genz.corner_peak": lambda: (1.0 + lin) ** (-(x.shape[1] + 1.0)),
        "genz.gaussian": lambda: np.exp(-(((x - u) * a) ** 2).sum(axis=1)),
        "genz.continuous": lambda: np.exp(-(np.abs(x - u) * a).sum(axis=1)),
        "genz.discontinuous": lambda: np.where((x[:, 0] > u[0]) | (x[:, 1] > u[1]), 0.0,
                                               np.exp(lin)),
    }[name]()
    got = genz.FAMILIES[name][0](x, a, u)
    np.testing.assert_array_equal(got, textbook)
    np.testing.assert_array_equal(x, x_before)
