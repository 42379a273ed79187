"""The local driver and the per-batch pipeline: determinism, resumption, stop rules, value kinds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mainboard.integrators.domain import Batch
from mainboard.integrators.driver import RunState, integrate_local, step
from mainboard.integrators.plain import to_plain
from mainboard.integrators.samplers import restore_sampler
from mainboard.integrators.seeding import LatentBatch
from mainboard.integrators.stages import (
    BatchResult,
    build_run,
    evaluate,
    materialize,
    merge_results,
    process_batch,
    sample,
    transform,
)

ROOT = Path(__file__).resolve().parents[2]


def spec(**changes: object) -> dict:
    base = {"name": "drv", "seed": 42, "domain": {"continuous": 3},
            "integrand": {"kind": "genz.gaussian", "a": [6.0, 6.0, 6.0], "u": [0.3, 0.5, 0.6]},
            "sampler": {"kind": "vegas", "bins": 24},
            "stop": {"max_iterations": 5},
            "batching": {"batch_size": 3000, "batches_per_iteration": 4}}
    base.update(changes)
    return base


def half_nan(x: np.ndarray) -> np.ndarray:
    """1 everywhere except NaN where x_1 < 0.25 and +inf where x_2 > 0.9."""
    out = np.ones(x.shape[0])
    out[x[:, 0] < 0.25] = np.nan
    out[x[:, 1] > 0.9] = np.inf
    return out


def test_batches_in_any_order_merge_bit_identically() -> None:
    run = build_run(spec())
    state = RunState.start(run)
    step(state)  # adapt once so the grid is not trivial
    sizes = state.next_batches()
    forward = [process_batch(run, state.sampler, 1, i, n) for i, n in enumerate(sizes)]
    backward = [process_batch(run, state.sampler, 1, i, n)
                for i, n in reversed(list(enumerate(sizes)))]
    a, b = merge_results(forward), merge_results(backward)
    assert a.partial.mean.tobytes() == b.partial.mean.tobytes()
    assert a.partial.m2.tobytes() == b.partial.m2.tobytes()
    for key in a.training:
        assert a.training[key].tobytes() == b.training[key].tobytes()


def _read_only(data: object) -> object:
    """Freeze every array, as the binary codec delivers them (zero-copy, read-only views)."""
    if isinstance(data, np.ndarray):
        frozen = data.copy()
        frozen.flags.writeable = False
        return frozen
    if isinstance(data, dict):
        return {k: _read_only(v) for k, v in data.items()}
    return data


def test_chained_stages_equal_the_fused_batch() -> None:
    """Stage by stage through plain, read-only data (as between Celery tasks) = fused."""
    run = build_run(spec(transforms=[{"kind": "affine", "scale": 1.0}]))
    state = RunState.start(run)
    step(state)
    snap = _read_only(state.sampler.snapshot())
    latent = LatentBatch.from_dict(sample(run, snap, 1, 0, 500).to_dict())
    batch = Batch.from_dict(_read_only(materialize(run, snap, latent).to_dict()))
    batch = Batch.from_dict(_read_only(transform(run, batch).to_dict()))
    chained = BatchResult.from_dict(_read_only(evaluate(run, snap, latent, batch).to_dict()))
    fused = process_batch(run, state.sampler, 1, 0, 500)
    assert chained.partial.mean.tobytes() == fused.partial.mean.tobytes()
    assert chained.training["grid_sum"].tobytes() == fused.training["grid_sum"].tobytes()
    merged = merge_results([chained])
    restored = restore_sampler(snap)
    restored.ingest(merged.training)
    restored.adapt()  # learning from read-only training data and state works too
    assert restored.version == 2


WORKER = """
import json, sys
from mainboard.integrators.plain import to_plain
from mainboard.integrators.stages import build_run, process_batch
job = json.loads(sys.stdin.read())
run = build_run(job["spec"])
result = process_batch(run, job["sampler"], job["iteration"], job["batch"], job["n"])
print(json.dumps(to_plain(result.to_dict())))
"""


def test_a_fresh_process_reproduces_a_batch_exactly() -> None:
    """What a remote worker does: spec and sampler snapshot as JSON in, batch result out."""
    run = build_run(spec())
    state = RunState.start(run)
    step(state)
    job = {"spec": run.spec.model_dump(mode="json"), "sampler": to_plain(state.sampler.snapshot()),
           "iteration": 1, "batch": 2, "n": 3000}
    proc = subprocess.run([sys.executable, "-c", WORKER], input=json.dumps(job), text=True,
                          capture_output=True, check=True, cwd=ROOT, timeout=60)
    remote = BatchResult.from_dict(json.loads(proc.stdout))
    local = process_batch(run, state.sampler, 1, 2, 3000)
    assert remote.partial.mean.tobytes() == local.partial.mean.tobytes()
    assert remote.partial.m2.tobytes() == local.partial.m2.tobytes()
    assert remote.training["grid_sum"].tobytes() == local.training["grid_sum"].tobytes()


@pytest.mark.parametrize("sampler", [{"kind": "vegas", "bins": 24},
                                     {"kind": "discrete", "grids": "per_channel", "bins": 8}])
def test_snapshot_restore_continues_identically(sampler: dict) -> None:
    extra = {"domain": {"continuous": 3, "discrete": [2, 2]},
             "integrand": {"kind": "channels", "coefficients": [1.0, 5.0, 0.1, 2.0],
                           "sigma": [0.1, 0.2, 0.3, 0.05]}} if sampler["kind"] == "discrete" else {}
    run = build_run(spec(sampler=sampler, **extra))
    straight = integrate_local(run)
    state = RunState.start(run)
    for _ in range(3):
        step(state)
    saved = json.loads(json.dumps(to_plain(state.snapshot())))
    resumed = integrate_local(run, state=RunState.restore(run, saved))
    assert resumed.iterations == straight.iterations == 5
    assert resumed.estimate == straight.estimate and resumed.error == straight.error
    assert resumed.samples == straight.samples
    with pytest.raises(ValueError, match="belongs to run"):
        RunState.restore(build_run(spec(seed=1)), saved)


def test_sampler_snapshot_round_trip_through_json() -> None:
    run = build_run(spec())
    state = RunState.start(run)
    step(state)
    snap = state.sampler.snapshot()
    again = restore_sampler(json.loads(json.dumps(to_plain(snap))))
    assert again.version == state.sampler.version == 1
    assert again.snapshot()["state"]["edges"].tobytes() == snap["state"]["edges"].tobytes()
    with pytest.raises(ValueError, match="shape"):
        bad = to_plain(snap)
        bad["state"]["edges"] = [[0.0, 1.0]]
        restore_sampler(bad)


def test_plain_data_of_arrays_is_json_ready_and_names_non_finite_floats() -> None:
    """Finite and integer arrays convert whole (Python numbers, exact through JSON); an
    array with a NaN or an infinity, or of complex numbers, is walked value by value."""
    finite = np.array([[0.1, 1e-300], [2.5, -3.0]])
    plain = to_plain({"grid": finite, "counts": np.arange(3, dtype=np.int64),
                      "mask": np.array([True, False]), "x": np.float32(0.5)})
    assert plain == {"grid": [[0.1, 1e-300], [2.5, -3.0]], "counts": [0, 1, 2],
                     "mask": [True, False], "x": 0.5}
    assert type(plain["grid"][0][0]) is float and type(plain["counts"][0]) is int
    assert np.array_equal(np.array(json.loads(json.dumps(plain))["grid"]), finite)
    assert to_plain(np.array([1.0, np.nan, -np.inf])) == [1.0, "nan", "-inf"]
    assert to_plain(np.array([1 + 2j])) == [1 + 2j]


def test_max_samples_is_exact_and_last_iteration_is_short() -> None:
    result = integrate_local(spec(stop={"max_samples": 30_500},
                                  batching={"batch_size": 4000, "batches_per_iteration": 3}))
    assert result.samples == 30_500
    assert result.iterations == 3  # 12000 + 12000 + 6500
    assert result.stop_reason == "max_samples"


def test_precision_targets_stop_early_but_not_before_min_samples() -> None:
    rel = integrate_local(spec(stop={"relative_error": 0.01, "max_iterations": 50}))
    assert rel.stop_reason == "relative_error" and rel.error <= 0.01 * abs(rel.estimate)
    held = integrate_local(spec(stop={"relative_error": 0.01, "min_samples": 120_000,
                                      "max_iterations": 50}))
    assert held.samples >= 120_000 and held.stop_reason == "relative_error"
    absolute = integrate_local(spec(stop={"absolute_error": 1e-4, "max_iterations": 50}))
    assert absolute.stop_reason == "absolute_error" and absolute.error <= 1e-4


def test_nan_and_inf_are_counted_and_excluded() -> None:
    target = f"{__name__}:half_nan"
    run = build_run(spec(integrand={"kind": "python", "target": target},
                         sampler={"kind": "naive"}, stop={"max_iterations": 2}))
    result = integrate_local(run)
    expected_bad = 0
    for k in range(2):
        for i in range(4):
            batch = materialize(run, run.new_sampler(), sample(run, run.new_sampler(), k, i, 3000))
            expected_bad += int(((batch.x[:, 0] < 0.25) | (batch.x[:, 1] > 0.9)).sum())
    assert result.nan_count == expected_bad > 0
    assert result.estimate == 1.0 and result.error < 1e-12  # mean of the finite samples only
    one = process_batch(run, run.new_sampler(), 0, 0, 3000)
    assert one.partial.nonfinite > 0 and one.nonfinite_example is not None
    assert result.to_dict()["nan_count"] == expected_bad


def test_complex_and_vector_results() -> None:
    complex_run = integrate_local(spec(
        integrand={"kind": "complex_exponential", "a": [1.0, 2.0, -3.0]},
        accumulator={"kind": "complex"}, sampler={"kind": "naive"}))
    assert isinstance(complex_run.estimate, complex)
    assert abs(complex_run.estimate.real - complex_run.exact.real) < 4 * complex_run.error.real
    assert abs(complex_run.estimate.imag - complex_run.exact.imag) < 4 * complex_run.error.imag
    out = complex_run.to_dict()
    assert set(out["estimate"]) == {"real", "imag"} and set(out["exact"]) == {"real", "imag"}
    json.dumps(out)
    implicit = build_run(spec(integrand={"kind": "complex_exponential", "a": [1.0, 2.0, 3.0]}))
    assert implicit.kind == "complex" and implicit.width == 2  # accumulator follows integrand
    vector_run = integrate_local(spec(integrand={"kind": "moments", "powers": [0, 1, 2]},
                                      accumulator={"kind": "vector"}))
    assert len(vector_run.estimate) == 3
    for est, err, exact in zip(vector_run.estimate, vector_run.error, vector_run.exact,
                               strict=True):
        assert abs(est - exact) <= 4 * err + 1e-12


def test_discrete_sampler_learns_channel_weights() -> None:
    coefficients = [10.0, 1.0, 0.1, 0.01]
    base = spec(domain={"continuous": 2, "discrete": [4]},
                integrand={"kind": "channels", "coefficients": coefficients, "sigma": 0.1},
                stop={"max_iterations": 6})
    adaptive = build_run({**base, "sampler": {"kind": "discrete", "floor": 0.02}})
    state = RunState.start(adaptive)
    while step(state) is not None:
        pass
    probs = state.sampler.probs
    assert probs[0] > 0.6 and probs[3] < 0.05 and probs.min() >= 0.02 / 4
    learned = state.result()
    uniform = integrate_local({**base, "sampler": {"kind": "vegas", "bins": 24}})
    assert learned.error < uniform.error
    for r in (learned, uniform):
        assert abs(r.estimate - r.exact) < 4 * r.error


def _walk_with_lookahead(state: RunState) -> int:
    """Step ``state`` to its end; at each iteration compare its lookahead with what the
    next iteration really is. Returns how many iterations had one."""
    seen = 0
    while sizes := state.next_batches():
        nxt = state.lookahead(sizes)
        results = [process_batch(state.run, state.sampler, state.iteration, i, n)
                   for i, n in enumerate(sizes)]
        state.apply(merge_results(results, expected=len(sizes)))
        if nxt is None:
            continue
        seen += 1
        after, sampler = nxt
        assert state.next_batches() == after  # planned again below: plan() is idempotent
        assert json.dumps(to_plain(sampler.snapshot()), sort_keys=True) == \
            json.dumps(to_plain(state.sampler.snapshot()), sort_keys=True)
    return seen


@pytest.mark.parametrize("stop", [{"max_samples": 37_000}, {"max_iterations": 4},
                                  {"relative_error": 1e-9, "max_samples": 30_000}])
def test_the_lookahead_of_a_sampler_that_does_not_learn_is_the_next_iteration(stop: dict
                                                                            ) -> None:
    state = RunState.start(build_run(spec(sampler={"kind": "naive"}, stop=stop)))
    assert _walk_with_lookahead(state) >= 1
    # the last iteration has none: no stop rule but an error target may end the run after it
    assert state.lookahead([3000]) is None


def test_a_frozen_vegas_grid_looks_ahead_and_a_learning_one_does_not() -> None:
    learning = RunState.start(build_run(spec()))
    assert _walk_with_lookahead(learning) == 0
    trained = RunState.start(build_run(spec(stop={"max_iterations": 2})))
    while step(trained) is not None:
        pass
    frozen = RunState.start(build_run(spec(stop={"max_iterations": 4})))
    frozen.sampler, frozen.frozen = trained.sampler, True
    assert _walk_with_lookahead(frozen) == 3
