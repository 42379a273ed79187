"""Process stages inside the real integration loop (mainboard.integrators.driver).

A process evaluator must give the built-in result bit for bit; a process sampler must drive
a run (and snapshot/restore); process transforms and materializers sit in the chain; every
invalid response from them fails its batch with a BatchError naming the command.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mainboard.errors import BatchError, ConfigError
from mainboard.integrators.accumulators import RunAccumulator
from mainboard.integrators.domain import Domain
from mainboard.integrators.driver import RunState, integrate_local
from mainboard.integrators.integrands import register_integrand
from mainboard.integrators.process.adapters import (
    ProcessBatchTransform,
    ProcessMaterializer,
    process_integrand,
    run_scope,
)
from mainboard.integrators.process.pool import default_pool
from mainboard.integrators.process.sampler import (
    MaterializedSampler,
    ProcessLatentBatch,
    ProcessSampler,
    latent_from_dict,
)
from mainboard.integrators.samplers import NaiveSampler, VegasSampler
from mainboard.integrators.seeding import LatentBatch
from mainboard.integrators.stages import Run, build_run
from mainboard.integrators.transforms import TransformChain
from tests.support.services import require

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "process"
MISBEHAVE = REPO / "tests" / "process_fixtures" / "misbehave.py"
EXACT = 1 - math.cos(1)
PY = sys.executable


@pytest.fixture(autouse=True)
def process_kind() -> Iterator[None]:
    """What the lead's registry line will do; processes of run "" are ended afterwards."""
    register_integrand("process", process_integrand)
    yield
    default_pool().release()


def spec(integrand: dict[str, Any], sampler: str = "vegas", iterations: int = 3) -> dict:
    return {"name": "proc", "seed": 11, "domain": {"continuous": 2}, "integrand": integrand,
            "sampler": {"kind": sampler}, "stop": {"max_iterations": iterations},
            "batching": {"batch_size": 3000, "batches_per_iteration": 3}}


BUILTIN = {"kind": "python", "target": "tests.process_fixtures.targets:sin_x0", "exact": EXACT}


def with_sampler(run: Run, sampler: Any) -> RunState:
    return RunState(run, sampler, RunAccumulator(run.kind, run.width, 0))


def near_exact(result: Any) -> None:
    assert abs(result.estimate - EXACT) < 5 * result.error, (result.estimate, result.error)


def test_process_evaluator_matches_the_builtin_bit_for_bit() -> None:
    command = [PY, str(EXAMPLES / "sin_evaluator.py")]
    with run_scope("bit-for-bit"):
        proc = integrate_local(spec({"kind": "process", "command": command, "exact": EXACT}))
    builtin = integrate_local(spec(BUILTIN))
    assert (proc.estimate, proc.error, proc.samples) == (builtin.estimate, builtin.error,
                                                          builtin.samples)
    near_exact(proc)
    assert len(default_pool()) == 1       # one process served every batch of the run
    default_pool().release("bit-for-bit")
    assert len(default_pool()) == 0


def test_c_evaluator_in_the_loop(tmp_path: Path) -> None:
    binary = tmp_path / "sin_c"
    subprocess.run([require("gcc"), "-O2", "-o", str(binary), str(EXAMPLES / "sin_evaluator.c"),
                    "-lm"], check=True, capture_output=True)
    c = integrate_local(spec({"kind": "process", "command": [str(binary)], "exact": EXACT}))
    builtin = integrate_local(spec(BUILTIN))
    assert c.estimate == pytest.approx(builtin.estimate, rel=1e-12)
    near_exact(c)


def test_nan_from_a_process_is_counted_not_fatal() -> None:
    nan = integrate_local(spec({"kind": "process", "command": [PY, str(MISBEHAVE), "nan"]},
                               sampler="naive", iterations=1))
    assert nan.nan_count == nan.samples == 9000


def sampler_state(run: Run, **args: Any) -> RunState:
    command = [PY, str(EXAMPLES / "uniform_sampler.py")]
    return with_sampler(run, ProcessSampler(run.domain, command=command,
                                            args={"batch_size": 500, **args}))


def test_a_process_sampler_drives_a_run_and_restores() -> None:
    run = build_run(spec(BUILTIN, sampler="naive", iterations=2))
    first = sampler_state(run, training_samples=20_000)
    result = integrate_local(run, state=first)
    near_exact(result)
    # the plan is the sampler's: 3 x 500, then (batch size doubled per ingest) 3 x 4000
    assert result.samples == 13_500 and [e.samples for e in result.iteration_estimates] == \
        [1_500, 12_000]
    # training values are real(f) * w per sample: their plain mean is the plain estimate
    mean = first.sampler.get_diagnostics()["mean_training_value"]
    assert abs(mean - EXACT) < 5 * result.error * math.sqrt(3)
    assert first.sampler.training_samples_remaining() == 20_000 - 13_500
    assert first.sampler.sample_plan() == {"kind": "produce", "nr_samples": 32_000}
    again = integrate_local(run, state=sampler_state(run, training_samples=20_000))
    assert again.estimate == result.estimate       # the batch seed reaches the process
    snap = first.sampler.snapshot()
    assert snap["state"]["process"]["seen"] == 13_500
    first.sampler.close()
    restored = ProcessSampler(run.domain, **snap["config"])
    restored.restore(snap)
    assert restored.get_diagnostics()["batch_size"] == 32_000
    restored.close()


def test_process_latent_batches_keep_their_points_through_plain_data() -> None:
    run = build_run(spec(BUILTIN, sampler="naive"))
    sampler = sampler_state(run).sampler
    latent = sampler.sample(11, 0, 3, 5)
    back = latent_from_dict(latent.to_dict())
    assert isinstance(back, ProcessLatentBatch)
    np.testing.assert_array_equal(sampler.materialize(back).x, sampler.materialize(latent).x)
    with pytest.raises(BatchError, match="carries no points"):
        sampler.materialize(LatentBatch(11, 0, 3, 5))
    assert type(latent_from_dict(LatentBatch(1, 0, 0, 2).to_dict())) is LatentBatch
    sampler.close()


@pytest.mark.parametrize(("mode", "fragment"), [
    ("short", "returned 112 bytes; expected 120"),
    ("weights", "weights that are not finite and positive"),
])
def test_invalid_process_sampler_batches_are_batch_errors(mode: str, fragment: str) -> None:
    sampler = ProcessSampler(Domain(2), command=[PY, str(MISBEHAVE), mode])
    with pytest.raises(BatchError, match=fragment) as err:
        sampler.sample(1, 0, 0, 5)
    assert "misbehave.py" in str(err.value)
    sampler.close()


def chain_with(run: Run, *stages: Any) -> Run:
    chain = TransformChain([], run.domain)
    chain.transforms, chain.dims = list(stages), [run.domain.continuous] * len(stages)
    return Run(run.spec, run.domain, run.integrand, chain, run.kind, run.width)


def test_a_process_transform_in_the_chain_keeps_the_integral() -> None:
    run = build_run(spec(BUILTIN, sampler="naive"))
    shift = ProcessBatchTransform({"command": [PY, str(EXAMPLES / "shift_transform.py")],
                                   "args": {"shift": [0.3, 0.6]}}, run.domain)
    shifted = integrate_local(chain_with(run, shift))
    plain = integrate_local(run)
    near_exact(shifted)
    assert shifted.estimate != plain.estimate    # the points did move


def load_example(name: str) -> Any:
    found = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def test_a_process_materializer_draws_the_points() -> None:
    run = build_run(spec(BUILTIN, sampler="naive"))
    table = {"kind": "process", "command": [PY, str(EXAMPLES / "seed_materializer.py")]}
    sampler = MaterializedSampler(NaiveSampler(run.domain), table)
    latent = sampler.sample(11, 2, 1, 50)
    twin = load_example("seed_materializer").SeededUniform(discrete_cardinalities=[],
                                                           continuous_dims=2)
    np.testing.assert_array_equal(sampler.materialize(latent).x,
                                  twin.materialize_batch(latent.to_dict()).xs_continuous)
    near_exact(integrate_local(run, state=with_sampler(run, sampler)))
    assert sampler.config()["materializer"] == table
    with pytest.raises(ConfigError, match="learns from the points it draws"):
        MaterializedSampler(VegasSampler(run.domain), table)


@pytest.mark.parametrize(("mode", "fragment"), [
    ("outside", "1 of 4 points outside the unit cube"),
    ("offsets", "xs_continuous_offsets must be [0, 2, ..., 8]"),
    ("weights", "weights[0] = 0.0"),
    ("types", "xs_continuous_row_major must hold only numbers"),
    ("count", "weights must be a list of 4 numbers, got 3 values"),
    ("discrete_range", "discrete index column 0 outside [0, 3)"),
    ("no_lists", "response needs lists xs_discrete_row_major and xs_discrete_offsets"),
    ("huge_int", "xs_discrete_row_major holds an integer outside the i64 range"),
])
def test_invalid_transform_and_materializer_output_fails_the_batch(mode: str,
                                                                  fragment: str) -> None:
    domain = Domain(2, [3])
    table = {"command": [PY, str(MISBEHAVE), mode]}
    batch = NaiveSampler(domain).materialize(LatentBatch(1, 0, 0, 4))
    for stage, call in ((ProcessBatchTransform(table, domain), "apply"),
                        (ProcessMaterializer(table, domain), "materialize")):
        arg = batch if call == "apply" else LatentBatch(1, 0, 0, 4)
        with pytest.raises(BatchError) as err:
            getattr(stage, call)(arg)
        assert fragment in str(err.value) and "misbehave.py" in str(err.value)


def test_crashes_and_hangs_fail_the_batch_not_the_worker() -> None:
    exit_cmd = [PY, str(MISBEHAVE), "exit"]
    with pytest.raises(BatchError, match=r"(?s)stage 'evaluate'.*exited with code 3.*boom"):
        integrate_local(spec({"kind": "process", "command": exit_cmd}, iterations=1))
    domain = Domain(2)
    batch = NaiveSampler(domain).materialize(LatentBatch(1, 0, 0, 4))
    with pytest.raises(BatchError, match="crashed again after one restart: exited with code 3"):
        ProcessBatchTransform({"command": exit_cmd}, domain).apply(batch)
    hang = ProcessSampler(domain, command=[PY, str(MISBEHAVE), "hang"])
    hang.process._ensure().request_timeout = 0.5  # started (and initialized) without the limit
    with pytest.raises(BatchError, match="did not answer produce_latent_batch within 0.5s"):
        hang.sample(1, 0, 0, 4)
    hang.close()
    probe = REPO / "tests" / "process_fixtures" / "helper_probe.py"
    bad = ProcessSampler(domain, command=[PY, str(probe), "sampler"])
    with pytest.raises(BatchError, match="sample_plan returned"):
        bad.sample_plan()
    bad.close()


@pytest.mark.parametrize("components", [0, [], ["a", "a"], True])
def test_bad_component_declarations_are_config_errors(components: Any) -> None:
    from mainboard.integrators.process.adapters import ProcessEvaluator

    with pytest.raises(ConfigError, match="integrand.components"):
        ProcessEvaluator({"command": [PY]}, 2, components=components)


def test_a_process_sampler_s_questions_are_checked() -> None:
    """A plan of no samples, a negative training count and offsets that do not describe the
    batch each fail in one line naming the command; a pause and a count pass through."""
    domain = Domain(2)

    def sampler(mode: str) -> ProcessSampler:
        return ProcessSampler(domain, command=[PY, str(MISBEHAVE), mode])

    bad = sampler("bad_plan")
    with pytest.raises(BatchError, match=r"sample_plan returned \{'kind': 'produce', "
                                         r"'nr_samples': 0\}; valid"):
        bad.sample_plan()
    assert bad.training_samples_remaining() == 5
    bad.close()
    fine = sampler("ok")
    assert fine.sample_plan() == {"kind": "pause"}
    idx, x, weights = fine.produce_latent_batch(3)  # no seed: the process draws its own
    assert (idx.shape, x.shape, weights.tolist()) == ((3, 0), (3, 2), [1.0, 1.0, 1.0])
    fine.close()
    remaining = sampler("bad_remaining")
    with pytest.raises(BatchError, match=r"training_samples_remaining returned -1; valid"):
        remaining.training_samples_remaining()
    remaining.close()
    offsets = sampler("sampler_offsets")
    with pytest.raises(BatchError, match=r"xs_continuous_offsets must describe 3 samples of "
                                         "fixed width 2"):
        offsets.produce_latent_batch(3, seed=1)
    offsets.close()


def test_the_old_helper_path_hands_out_the_standalone_package() -> None:
    import gammaboard_process
    from mainboard.integrators.process import helper

    assert helper.__all__ == gammaboard_process.__all__
    assert all(getattr(helper, name) is getattr(gammaboard_process, name)
               for name in gammaboard_process.__all__)
