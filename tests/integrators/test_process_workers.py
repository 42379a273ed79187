"""External processes on real Celery workers: same numbers, clear failures, nothing left behind.

Real redis-server, real ``celery worker`` subprocesses started without ``-I`` (as a user,
the systemd unit or compose starts them), real child processes speaking the protocol. Each
example process records its pid in a directory, so a test can count how many were started
(one per worker process and run, reused across batches) and check that every one is gone
once the run ends, while the workers live on.
"""

from __future__ import annotations

import math
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

import mainboard
from mainboard import keys
from mainboard.config import Config
from mainboard.errors import BatchError, IntegrationFailed
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.process.pool import default_pool
from mainboard.integrators.stages import build_run, prepare_sampler, release_processes
from mainboard.receipts import RunFailed
from mainboard.runs.store import RunStore
from mainboard.tasks import STAGE_PREFIX, codec
from mainboard.tasks import context as task_context
from mainboard.tasks.app import make_app
from mainboard.tasks.coordinator import publish_run
from mainboard.tasks.runner import load_spec
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import REPO, module_fixtures
from tests.support.services import RedisServer

pytestmark = pytest.mark.live
EXAMPLES = REPO / "examples" / "process"
MISBEHAVE = REPO / "tests" / "process_fixtures" / "misbehave.py"
EXACT = 1 - math.cos(1)
BUILTIN = {"kind": "python", "target": "tests.process_fixtures.targets:sin_x0", "exact": EXACT}
META = {"peak": 0.25}


def run_dict(integrand: dict[str, Any], sampler: dict[str, Any] | None = None, *,
             name: str = "proc-workers", fuse: bool = False, iterations: int = 3) -> dict:
    """A small 2-d run: ``iterations`` x 4 batches of 2000 samples."""
    return {"name": name, "seed": 5, "domain": {"continuous": 2}, "integrand": integrand,
            "sampler": sampler or {"kind": "vegas", "bins": 16},
            "stop": {"max_iterations": iterations},
            "batching": {"batch_size": 2000, "batches_per_iteration": 4, "fuse": fuse}}


def write_processes(directory: Path) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """An evaluator (sin x0, announcing META) and a sampler that refuses to work without
    META: both record their pid under ``directory/pids``. Returns their tables and that dir."""
    pids = directory / "pids"
    pids.mkdir(parents=True)
    prelude = (f"import os, sys\nsys.path.insert(0, {str(EXAMPLES)!r})\n"
               f"open(os.path.join({str(pids)!r}, '{{}}-' + str(os.getpid())), 'w').close()\n")
    evaluator, sampler = directory / "evaluator.py", directory / "sampler.py"
    evaluator.write_text(prelude.format("evaluator") + (
        "from sin_evaluator import Sin\nfrom mainboard.integrators.process import run_evaluator\n"
        f"class Meta(Sin):\n    metadata = {META!r}\nrun_evaluator(Meta)\n"))
    sampler.write_text(prelude.format("sampler") + f"""
from uniform_sampler import Uniform
from mainboard.integrators.process import run_sampler


class Strict(Uniform):
    def __init__(self, *, evaluator_metadata=None, **kw):
        super().__init__(**kw)
        self.meta = evaluator_metadata

    @classmethod
    def from_snapshot(cls, *, evaluator_metadata=None, **kw):
        sampler = super().from_snapshot(**kw)
        sampler.meta = evaluator_metadata
        return sampler

    def check(self):
        if self.meta != {META!r}:
            raise ValueError(f"no evaluator metadata handed over: {{self.meta!r}}")

    def produce_latent_batch(self, nr_samples, seed=None):
        self.check()
        return super().produce_latent_batch(nr_samples, seed)

    def ingest_training_values(self, values):
        self.check()
        super().ingest_training_values(values)


run_sampler(Strict)
""")
    return ({"kind": "process", "command": [sys.executable, str(evaluator)], "exact": EXACT},
            {"kind": "process", "command": [sys.executable, str(sampler)],
             "args": {"batch_size": 500}}, pids)


def recorded(pids: Path, role: str) -> list[int]:
    return [int(p.name.split("-")[1]) for p in pids.glob(f"{role}-*")]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone: it no longer computes anything)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    """The pids still alive after waiting up to ``timeout`` seconds for them to exit."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def fleet_log(fleet: LocalWorkers) -> str:
    return "".join(p.read_text(errors="replace") for p in fleet.log_dir.glob("*.log"))


def same_numbers(a: Any, b: Any) -> None:
    assert (a.estimate, a.error, a.chi2_dof, a.samples, a.iterations, a.nan_count) == \
           (b.estimate, b.error, b.chi2_dof, b.samples, b.iterations, b.nan_count)


workspace_fixture, fleet_fixture = module_fixtures(2)


def test_process_evaluator_on_two_workers_matches_the_builtin(workspace: Config,
                                                               tmp_path: Path) -> None:
    evaluator, _, pids = write_processes(tmp_path)
    builtin = integrate_local(run_dict(BUILTIN))
    result = mainboard.integrate(run_dict(evaluator), workers=2, config=workspace)
    same_numbers(result, builtin)  # same seed: the same points, the same sin(x0), bit for bit
    assert result.samples == 24_000 and result.exact == EXACT
    assert abs(result.estimate - EXACT) < 5 * result.error
    started = recorded(pids, "evaluator")
    assert 1 <= len(started) <= 2  # one per worker process, reused across 12 batches
    assert wait_gone(started) == []  # ended with the run (and the workers it started)


def test_process_sampler_and_evaluator_on_the_fleet(workspace: Config, fleet: LocalWorkers,
                                                    tmp_path: Path) -> None:
    """Both stages in processes: the coordinator's sampler (the one owner: it plans, produces,
    adapts, snapshots) hears the evaluator's metadata (it refuses to work without it); the
    numbers equal the in-process run; every process ends with the run."""
    def run(evaluator: dict, sampler: dict) -> dict:  # the sampler plans 500, then 8000
        return {**run_dict(evaluator, sampler), "stop": {"max_iterations": 3,
                                                          "max_samples": 24_000}}

    local_eval, local_sampler, _ = write_processes(tmp_path / "local")
    reference = integrate_local(run(local_eval, local_sampler))
    evaluator, sampler, pids = write_processes(tmp_path / "fleet")
    result = mainboard.integrate(run(evaluator, sampler), workers=0, config=workspace)
    same_numbers(result, reference)
    assert result.samples == 24_000 and abs(result.estimate - EXACT) < 5 * result.error
    assert [e.samples for e in result.iteration_estimates] == [2_000, 22_000]
    evaluators, samplers = recorded(pids, "evaluator"), recorded(pids, "sampler")
    assert 1 <= len(evaluators) <= 3  # each worker process once, the coordinator once
    assert len(samplers) == 1  # the coordinator's only: workers never start one
    assert wait_gone(evaluators + samplers) == []  # released when the run finished ...
    assert all(p.poll() is None for p in fleet.procs)  # ... by workers that live on
    # the processes' @gblog lines land in the worker's log at their level
    assert re.search(rf"INFO/ForkPoolWorker-\d+\] \[evaluator .*{re.escape(str(tmp_path))}"
                     r"/fleet/evaluator\.py pid \d+\] sin evaluator ready", fleet_log(fleet))


def test_process_transform_and_materializer_in_the_chain(workspace: Config, fleet: LocalWorkers,
                                                         tmp_path: Path) -> None:
    """sample | materialize (process) | transform (process) | evaluate (process) | accumulate,
    each stage on whichever worker takes it: the in-process numbers, bit for bit."""
    evaluator, _, pids = write_processes(tmp_path)
    sampler = {"kind": "naive", "materializer": {
        "kind": "process", "command": [sys.executable, str(EXAMPLES / "seed_materializer.py")]}}
    transforms = [{"kind": "process", "args": {"shift": [0.3, 0.6]},
                   "command": [sys.executable, str(EXAMPLES / "shift_transform.py")]}]
    run = {**run_dict(evaluator, sampler, name="proc-chain"), "transforms": transforms}
    reference = integrate_local(run)
    result = mainboard.integrate(run, workers=0, config=workspace)
    same_numbers(result, reference)
    assert abs(result.estimate - EXACT) < 5 * result.error
    assert wait_gone(recorded(pids, "evaluator")) == []


@pytest.mark.parametrize(("mode", "settings", "expected"), [
    ("exit", {}, ["crashed again after one restart", "exited with code 3",
                  "boom: something fatal happened in the integrand"]),
    # 5 s, not 1: the same timeout covers the process's start (initialize), which took over
    # 1 s under the whole suite on a slow machine and was reported instead of the hang
    ("hang", {"request_timeout": 5.0}, ["did not answer eval_batch within 5s", "killed it"]),
])
def test_a_failing_process_fails_the_run_and_the_workers_survive(
        mode: str, settings: dict, expected: list[str], workspace: Config,
        fleet: LocalWorkers) -> None:
    table = {"kind": "process", "command": [sys.executable, str(MISBEHAVE), mode], **settings}
    run = run_dict(table, name=f"proc-{mode}", fuse=True, iterations=1)
    with pytest.raises(IntegrationFailed) as failure:
        mainboard.integrate(run, workers=0, config=workspace)
    message = str(failure.value)
    assert "failed at stage 'evaluate'" in message and f"misbehave.py {mode}" in message
    for fragment in expected:
        assert fragment in message, message
    failed = RunStore(workspace.state_dir).receipts(load_spec(run).run_id()).last(RunFailed.topic)
    assert isinstance(failed, RunFailed) and failed.stage == "evaluate"
    assert expected[-1] in failed.error
    assert all(p.poll() is None for p in fleet.procs)  # no worker died with the process
    if mode == "exit":  # the first crash was logged by the worker, and the process restarted
        assert re.search(r"WARNING/ForkPoolWorker-\d+\] evaluator process `.*misbehave\.py "
                         r"exit` crashed \(exited with code 3 .*restarting it once",
                         fleet_log(fleet))
    good = mainboard.integrate(run_dict(BUILTIN, name="after-failure"), workers=0,
                               config=workspace)
    assert good.samples == 24_000


@pytest.fixture
def app(redis_server: RedisServer) -> Iterator[Celery]:
    import mainboard.tasks.stages  # noqa: F401 - registers the stage tasks

    celery_app = make_app(broker_url=redis_server.url)
    yield celery_app
    celery_app.close()


def publish(r: redis.Redis, data: dict[str, Any], run_id: str, iterations: int = 1) -> None:
    """What a coordinator publishes: the run, its status, the samplers of ``iterations``."""
    run = build_run(data)
    publish_run(r, run_id, run.spec.model_dump(mode="json"))
    r.hset(keys.run_state(run_id), "status", "running")
    for k in range(iterations):
        r.set(keys.iteration_sampler(run_id, k), codec.dumps(run.new_sampler().snapshot()))


def test_stage_processes_belong_to_the_coordinators_run_id(app: Celery, tmp_path: Path,
                                                           redis_server: RedisServer) -> None:
    """In-process (eager) stage tasks: processes are scoped to the id in the message (a
    clone's differs from its spec's); a process sampler's batch comes from its one owner
    (here the test), the ``sample`` task refuses to draw one, and no stage starts a sampler
    process; the run's end releases everything."""
    evaluator, sampler, pids = write_processes(tmp_path)
    data = run_dict(evaluator, sampler, fuse=True)
    run_id = "clone-" + uuid.uuid4().hex[:10]
    assert run_id != load_spec(data).run_id()
    r = redis.Redis.from_url(redis_server.url)
    publish(r, data, run_id, iterations=1)
    sample, fused = app.tasks[STAGE_PREFIX + "sample"], app.tasks[STAGE_PREFIX + "fused"]
    run = build_run(data)
    owner = prepare_sampler(run, run.new_sampler())
    release_processes(run.run_id)  # the evaluator it asked for its metadata
    try:
        with pytest.raises(BatchError, match="produced by the run's coordinator"):
            sample.apply(args=(run_id, 0, 0, 300)).get()
        latent = owner.sample(run.spec.seed, 0, 0, 300).to_dict()
        owner.close()
        first = fused.apply(args=({"ref": {"run": run_id, "iteration": 0, "batch": 0,
                                           "n": 300}, "latent": latent},)).get()
        assert first["stored"] is True
        assert {key[1] for key in default_pool()._entries} == {run_id}
        assert len(recorded(pids, "sampler")) == 1  # the owner's; no stage started one

        r.hset(keys.run_state(run_id), "status", "finished")  # the coordinator is done
        deadline = time.monotonic() + 60  # a hang guard: the event is the pool emptied
        while len(default_pool()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(default_pool()) == 0
        assert (run_id, 0) not in task_context._local().samplers
        assert wait_gone(recorded(pids, "evaluator") + recorded(pids, "sampler")) == []
    finally:
        task_context.release_run(run_id)
        release_processes()


def test_worker_shutdown_ends_a_process_that_ignores_stdin_and_sigterm(
        redis_server: RedisServer, app: Celery, tmp_path: Path) -> None:
    """A run still in progress when its worker stops: the process must not be orphaned, even
    one that ignores stdin EOF and SIGTERM (only the close sequence's SIGKILL ends it)."""
    marker = str(tmp_path / f"stubborn-{uuid.uuid4().hex[:8]}")
    table = {"kind": "process", "command": [sys.executable, str(MISBEHAVE), "stubborn", marker],
             "shutdown_grace": 0.3, "terminate_grace": 0.3}
    run_id = "stubborn-" + uuid.uuid4().hex[:8]
    r = redis.Redis.from_url(redis_server.url)
    publish(r, run_dict(table, fuse=True), run_id)
    queue = f"lone-{run_id}"  # this worker's own queue: no other worker may take the batch
    workers = LocalWorkers(1, redis_server.url, tmp_path / "logs", prefix="lone",
                           queue=queue).start()
    try:
        latent = app.tasks[STAGE_PREFIX + "sample"].apply_async(
            (run_id, 0, 0, 100), queue=queue).get(timeout=60)
        out = app.tasks[STAGE_PREFIX + "fused"].apply_async((latent,), queue=queue
                                                            ).get(timeout=60)
        assert out["stored"] is True
        stubborn = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                    and marker in _cmdline(p)]
        assert len(stubborn) == 1 and alive(stubborn[0])
    finally:
        workers.stop()
    left = wait_gone(stubborn, timeout=10)
    for pid in left:  # never leave an orphan behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert left == [], "the process outlived its worker"
    log = (tmp_path / "logs").glob("*.log")
    assert any(f"released the external processes of runs {run_id}" in p.read_text()
               for p in log)


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
