"""Distributed results are bit-identical to the in-process driver, whatever the workers.

Real redis-server, real `celery worker` subprocesses; small budgets so the whole file
takes seconds, not minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import mainboard
from mainboard.config import Config
from mainboard.integrators.driver import integrate_local
from mainboard.tasks import COORDINATOR_QUEUE
from mainboard.tasks.workers import LocalWorkers, worker_command
from tests.support.integration import (
    GAUSS_4D,
    fleet_iter,
    same_numbers,
    spec,
    subprocess_env,
    write_workspace,
)
from tests.support.services import RedisServer

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Config:
    return write_workspace(tmp_path_factory.mktemp("ws"), redis_server)


@pytest.mark.parametrize(("workers", "beta"), [(1, 0.75), (2, 0.0), (4, 0.75)],
                         ids=["vegas+-1", "classic-2", "vegas+-4"])
def test_estimate_is_bit_identical_for_any_worker_count(workspace: Config, workers: int,
                                                        beta: float) -> None:
    """VEGAS+ strata plans travel in the iteration's sampler snapshot; classic VEGAS too."""
    run = spec(GAUSS_4D, batching={"batches_per_iteration": 5},
               sampler={**GAUSS_4D["sampler"], "beta": beta})
    local = integrate_local(run)
    result = mainboard.integrate(run, workers=workers, config=workspace)
    same_numbers(result, local)
    assert result.samples == 120_000 and result.run_id == local.run_id
    assert abs(result.estimate - result.exact) < 5 * result.error


@pytest.fixture(scope="module")
def fleet(workspace: Config, redis_server: RedisServer,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorkers]:
    yield from fleet_iter(2, redis_server, tmp_path_factory.mktemp("fleet"))


GAUSS_8D = spec(GAUSS_4D, domain={"continuous": 8},
                integrand={"kind": "genz.gaussian", "a": [5.0] * 8, "u": [0.5] * 8})
BALL = spec(GAUSS_4D, transforms=[{"kind": "unit_ball", "radius": 1.0}],
            integrand={"kind": "gaussian_peak", "sigma": 0.3, "u": [0.0] * 4})


@pytest.mark.parametrize("base", [GAUSS_8D, BALL], ids=["vegas-8d", "unit-ball"])
def test_chained_and_fused_stages_give_the_same_result(base: dict, workspace: Config,
                                                       fleet: LocalWorkers) -> None:
    """Arrays crossing the broker between stages change nothing, not even their layout."""
    fused = mainboard.integrate(base, workers=0, config=workspace)
    chained_spec = spec(base, batching={"fuse": False})
    chained = mainboard.integrate(chained_spec, workers=0, config=workspace)
    same_numbers(fused, chained)
    assert fused.run_id != chained.run_id  # the spec differs, so does the content-derived id
    same_numbers(chained, integrate_local(chained_spec))


def test_complex_integrand_reports_real_and_imaginary_parts(workspace: Config,
                                                            fleet: LocalWorkers) -> None:
    run = spec(GAUSS_4D, integrand={"kind": "complex_exponential", "a": [1.0, 2.0, 0.5, 1.5]},
               accumulator={"kind": "complex"})
    result = mainboard.integrate(run, workers=0, config=workspace)
    same_numbers(result, integrate_local(run))
    assert isinstance(result.estimate, complex) and isinstance(result.error, complex)
    plain = result.to_dict()
    assert set(plain["estimate"]) == {"real", "imag"} and set(plain["exact"]) == {"real", "imag"}
    assert abs(result.estimate.real - result.exact.real) < 5 * result.error.real
    assert abs(result.estimate.imag - result.exact.imag) < 5 * result.error.imag


def test_pipeline_integrate_delay(workspace: Config, fleet: LocalWorkers,
                                  redis_server: RedisServer, tmp_path: Path) -> None:
    """`mainboard.tasks.integrate.delay(run_dict)` on a coordinator-queue worker."""
    env = {**subprocess_env(), "MAINBOARD_BROKER_URL": redis_server.url}
    log = (tmp_path / "coordinator.log").open("wb")
    command = worker_command("coord@%h", queue=COORDINATOR_QUEUE, concurrency=1)
    coordinator = subprocess.Popen(command, env=env, cwd=workspace.root, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = ("import json, sys, mainboard.tasks\n"
                "run = json.loads(sys.argv[1])\n"
                "print(json.dumps(mainboard.tasks.integrate.delay(run).get(timeout=120)))\n")
        run = spec(GAUSS_4D, name="pipeline")
        logs_before = set((workspace.state_dir / "workers").glob("*.log"))
        done = subprocess.run([sys.executable, "-c", code, json.dumps(run)], env=env,
                              cwd=workspace.root, capture_output=True, text=True, timeout=150)
        assert done.returncode == 0, done.stderr[-2000:]
        got = json.loads(done.stdout)
        local = integrate_local(run)
        assert got["estimate"] == local.estimate and got["error"] == local.error
        assert got["run_id"] == local.run_id and got["samples"] == 120_000
        assert (workspace.state_dir / "runs" / local.run_id / "receipts.ndjson").exists()
        assert set((workspace.state_dir / "workers").glob("*.log")) == logs_before  # fleet only
    finally:
        coordinator.terminate()
        coordinator.wait(30)
        log.close()
