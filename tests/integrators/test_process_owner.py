"""One owner per process sampler, the sampler's plan, signed training values, training phase.

The sampler under test (tests/process_fixtures/selfseeded_sampler.py) is written from
docs/process-protocol.md with its own framing code, keeps its own random stream (ignoring
``seed``) and logs every batch it produces and every training batch it ingests. Real
redis-server and real ``celery worker`` processes for the distributed cases.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import mainboard
from mainboard.cli import cli
from mainboard.config import Config
from mainboard.errors import ConfigError, IntegrationFailed
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.process.pool import ManagedProcess
from mainboard.integrators.projection import project
from mainboard.integrators.spec import parse_run
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import REPO, module_fixtures

SAMPLER = REPO / "tests" / "process_fixtures" / "selfseeded_sampler.py"
EXAMPLES = REPO / "examples" / "process"
EXACT = 1 - math.cos(1)
SIN = {"kind": "python", "target": "tests.process_fixtures.targets:sin_x0", "exact": EXACT}
CEXP = {"kind": "python", "target": "tests.process_fixtures.targets:cexp_3x0",
        "components": "complex"}

workspace_fixture, fleet_fixture = module_fixtures(2)


def owned_run(log: Path, *, integrand: dict = SIN, max_samples: int = 9_000,
              sampler: dict | None = None, **args: Any) -> dict[str, Any]:
    return {"name": "owner", "seed": 3, "domain": {"continuous": 2}, "integrand": integrand,
            "sampler": {"kind": "process", "command": [sys.executable, str(SAMPLER)],
                        "args": {"log": str(log), "seed": 7, "batch_size": 1500, **args},
                        **(sampler or {})},
            "stop": {"max_samples": max_samples},
            "batching": {"batch_size": 1000, "batches_per_iteration": 4}}


def events(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()]


def check_exactly_once(log: Path, samples: int) -> list[list[str]]:
    """One process produced every batch once, ingested in production order, all counted."""
    ev = events(log)
    assert sum(e[0] == "start" for e in ev) == 1, "a second sampler process was started"
    produced = [(int(e[1]), int(e[2])) for e in ev if e[0] == "produce"]
    ingested = [(int(e[1]), int(e[2])) for e in ev if e[0] == "ingest"]
    assert [b for b, _ in produced] == list(range(len(produced)))  # distinct, in order
    assert ingested == produced  # every batch's training values, in production order
    assert sum(n for _, n in produced) == samples  # merged samples = distinct batches
    return ev


@pytest.mark.live
@pytest.mark.parametrize("workers", [2, 3])
def test_a_self_seeded_sampler_never_integrates_a_batch_twice(
        workers: int, workspace: Config, fleet: LocalWorkers, tmp_path: Path) -> None:
    """The fleet's 2 workers, or those plus one the run starts."""
    local_log, log = tmp_path / "local.log", tmp_path / "fleet.log"
    reference = integrate_local(owned_run(local_log, pause_after=3))
    result = mainboard.integrate(owned_run(log, pause_after=3), workers=workers - 2,
                                 config=workspace)
    ev = check_exactly_once(log, result.samples)
    assert result.samples == 9_000 and ["plan", "pause"] in ev  # the sampler's own plan
    assert abs(result.estimate - EXACT) < 4 * result.error
    # its stream is its own, so the run equals the in-process one, bit for bit
    assert (result.estimate, result.error) == (reference.estimate, reference.error)


def test_plan_pause_and_remaining_shape_the_iterations(tmp_path: Path) -> None:
    """Batches of the plan's size, an iteration ends at a pause, the training phase ends
    when the sampler says it has enough (remaining 0), and lasts at most N otherwise."""
    log = tmp_path / "a.log"
    result = integrate_local(owned_run(log, pause_after=2, train=3_000, max_samples=24_000,
                                       sampler={"training_samples": 6_000}))
    ev = check_exactly_once(log, result.samples)
    assert result.training_samples == 3_000 and result.samples == 24_000
    assert [e.samples for e in result.iteration_estimates] == [3_000] * 7
    assert ["remaining", "0"] in ev and ev.count(["plan", "pause"]) == 6
    longer = integrate_local(owned_run(tmp_path / "b.log", train=9_000,
                                       sampler={"training_samples": 6_000}))
    assert longer.training_samples == 6_000  # the sampler wanted more: capped at N
    none = integrate_local(owned_run(tmp_path / "c.log", sampler={"training_samples": 4_000}))
    assert none.training_samples == 4_000  # remaining null: the run's N


def test_a_sampler_pausing_with_nothing_outstanding_fails_the_run(tmp_path: Path) -> None:
    with pytest.raises(IntegrationFailed) as failure:
        integrate_local(owned_run(tmp_path / "p.log", pause_always=True))
    message = str(failure.value)
    assert "\n" not in message and "selfseeded_sampler.py" in message
    assert "paused before iteration 0 with no batch outstanding" in message


@pytest.mark.live
def test_a_training_phase_is_counted_but_not_estimated(workspace: Config,
                                                        fleet: LocalWorkers) -> None:
    run = {"name": "warmup", "seed": 4, "domain": {"continuous": 3},
           "integrand": {"kind": "genz.gaussian", "a": [4.0] * 3, "u": [0.4] * 3},
           "sampler": {"kind": "vegas", "bins": 16, "training_samples": 12_000},
           "stop": {"max_samples": 30_000},
           "batching": {"batch_size": 2_500, "batches_per_iteration": 2}}
    local = integrate_local(run)
    result = mainboard.integrate(run, workers=0, config=workspace)
    assert (result.estimate, result.error, result.samples, result.training_samples) == \
        (local.estimate, local.error, local.samples, local.training_samples)
    assert result.samples == 30_000 and result.training_samples == 12_000  # max counts both
    assert sum(e.samples for e in result.iteration_estimates) == 18_000  # training left out
    assert result.iterations == 4 and abs(result.estimate - result.exact) < 5 * result.error
    shown = CliRunner().invoke(cli, ["--config", str(workspace.path), "runs", "show",
                                     result.run_id, "--json"])
    assert shown.exit_code == 0, shown.output
    history = json.loads(shown.stdout)["history"]
    assert history[0]["training_samples"] == 5_000 and history[-1]["training_samples"] == 12_000
    grid = history[-1]["diagnostics"]["grid"]
    assert grid["bins"] == 16 and min(grid["width_ratio"]) > 2  # the grid learned the peak
    text = CliRunner().invoke(cli, ["--config", str(workspace.path), "runs", "show",
                                    result.run_id])
    assert "grid width ratio" in text.stdout and "(training 12,000)" in text.stdout
    with pytest.raises(ConfigError, match="sampler.training_samples"):
        parse_run({**run, "sampler": {"kind": "vegas", "training_samples": 30_000}})


def test_training_values_are_the_signed_projection_times_the_weight() -> None:
    f = np.array([1 + 2j, -3 - 1j, np.nan + 0j, 2 - 2j])
    w = np.array([0.5, 2.0, 1.0, 1.0])
    names = ["re", "im"]
    assert project(f, w, "real", names).tolist() == [0.5, -6.0, 0.0, 2.0]
    assert project(f, w, "imag", names).tolist() == [1.0, -2.0, 0.0, -2.0]
    assert project(f, w, "im", names).tolist() == [1.0, -2.0, 0.0, -2.0]
    np.testing.assert_allclose(project(f, w, "abs", names), [0.5 * 5 ** .5, 2 * 10 ** .5, 0,
                                                             8 ** .5])
    np.testing.assert_allclose(project(f, w, "abs_sq", names), [2.5, 20.0, 0.0, 8.0])
    vec = np.array([[1.0, -4.0], [np.inf, 3.0]])
    assert project(vec, np.ones(2), "b", ["a", "b"]).tolist() == [-4.0, 3.0]
    assert project(vec, np.ones(2), "real", ["a", "b"]).tolist() == [1.0, 0.0]
    with pytest.raises(ConfigError, match="training_projection.*no 'imag'"):
        parse_run(owned_run(Path("x"), sampler={"training_projection": "imag"}))


def test_a_process_sampler_learns_the_projection_it_asked_for(tmp_path: Path) -> None:
    """imag(exp(3i x0)) * w = sin(3 x0) per sample: recomputed here from the sampler's own
    stream, summed per batch, equal to what it ingested."""
    log = tmp_path / "imag.log"
    integrate_local(owned_run(log, integrand=CEXP, max_samples=3_000,
                              sampler={"training_projection": "imag"}))
    sums = [float(e[3]) for e in events(log) if e[0] == "ingest"]
    x0 = [np.random.default_rng([7, k]).random((1500, 2))[:, 0] for k in range(2)]
    np.testing.assert_allclose(sums, [np.sin(3 * x).sum() for x in x0], rtol=1e-12)


def test_nan_and_inf_from_the_helper_pass_through_and_train_as_zero(tmp_path: Path) -> None:
    evaluator = tmp_path / "nan_eval.py"
    evaluator.write_text(
        "import numpy as np\nfrom mainboard.integrators.process import Evaluator, "
        "run_evaluator\nclass Holes(Evaluator):\n    def eval(self, xd, xc):\n"
        "        v = np.sin(xc[:, 0])\n        v[xc[:, 1] < 0.1] = np.nan\n"
        "        v[xc[:, 1] > 0.9] = np.inf\n        return v\nrun_evaluator(Holes)\n")
    log = tmp_path / "nan.log"
    result = integrate_local(owned_run(log, max_samples=3_000, integrand={
        "kind": "process", "command": [sys.executable, str(evaluator)]}))
    x = [np.random.default_rng([7, k]).random((1500, 2)) for k in range(2)]
    holes = sum(int(((p[:, 1] < 0.1) | (p[:, 1] > 0.9)).sum()) for p in x)
    assert result.nan_count == holes > 0  # counted by the accumulator, not refused
    sums = [float(e[3]) for e in events(log) if e[0] == "ingest"]
    kept = [np.where((p[:, 1] >= 0.1) & (p[:, 1] <= 0.9), np.sin(p[:, 0]), 0).sum() for p in x]
    np.testing.assert_allclose(sums, kept, rtol=1e-12)  # sent as 0


def test_a_materializer_reads_both_latent_batch_spellings() -> None:
    """mainboard's ``{nr_samples, latent_batch: {nr_samples, payload, run_seed, ...}}`` and
    gammaboard v2's ``{nr_samples, latent_batch: {nr_samples, payload}}`` give the same points."""
    from mainboard.integrators.process.adapters import latent_json, to_spec
    from mainboard.integrators.seeding import LatentBatch

    latent = LatentBatch(5, 1, 2, 4)
    ours = latent_json(latent)
    assert ours["nr_samples"] == 4 and ours["payload"] == {"run_seed": 5, "iteration": 1,
                                                           "batch_index": 2, "n": 4}
    spec = to_spec({"command": [sys.executable, str(EXAMPLES / "seed_materializer.py")]},
                   "sampler.materializer")
    proc = ManagedProcess(spec, "materializer", {"domain": {"continuous": {"dims": 2}}})
    try:
        a, _ = proc.call("materialize_batch", {"nr_samples": 4, "latent_batch": ours})
        v2 = {"nr_samples": 4, "payload": ours["payload"]}
        b, _ = proc.call("materialize_batch", {"nr_samples": 4, "latent_batch": v2})
    finally:
        proc.close()
    assert a == b and len(a["weights"]) == 4


def test_a_restored_owner_continues_the_stream_where_its_snapshot_left_it(
        tmp_path: Path) -> None:
    """What a resumed run does when its coordinator died: a new sampler process started from
    the last iteration's snapshot produces the next batches, and the run ends with the
    uninterrupted numbers."""
    from mainboard.integrators.driver import RunState, step
    from mainboard.integrators.stages import build_run

    whole = integrate_local(owned_run(tmp_path / "whole.log", pause_after=3))
    log = tmp_path / "split.log"
    run = build_run(owned_run(log, pause_after=3))
    first = RunState.start(run)
    step(first)
    snapshot = first.snapshot()
    first.sampler.close()  # the coordinator dies with its sampler process
    assert snapshot["diagnostics"]["process"] == {"produced": 3, "ingested": 4_500}
    state = RunState.restore(run, snapshot)
    try:
        resumed = integrate_local(run, state=state)
    finally:
        state.sampler.close()
    assert (resumed.estimate, resumed.error, resumed.samples) == \
        (whole.estimate, whole.error, whole.samples)
    starts = [e for e in events(log) if e[0] == "start"]
    assert [int(e[2]) for e in starts] == [0, 3]  # the second process began at batch 3
