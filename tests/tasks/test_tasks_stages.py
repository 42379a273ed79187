"""The stage tasks on a real worker: callable one by one, exactly once, failing cleanly.

One real `celery worker` subprocess on the session's redis-server serves the module.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from celery import Celery

import mainboard
from mainboard import keys
from mainboard.config import Config
from mainboard.errors import ConfigError, IntegrationFailed
from mainboard.integrators import stages
from mainboard.integrators.samplers import Sampler
from mainboard.integrators.stages import Run, build_run, process_batch
from mainboard.receipts import RunFailed
from mainboard.runs.store import RunStore
from mainboard.tasks import STAGE_PREFIX, claims, codec
from mainboard.tasks.app import make_app
from mainboard.tasks.claims import Claim
from mainboard.tasks.context import BatchRef, Skip, StageContext
from mainboard.tasks.coordinator import publish_run
from mainboard.tasks.runner import load_spec
from mainboard.tasks.stages import unpack_batch
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import GAUSS_4D, module_fixtures, spec
from tests.support.services import RedisServer
from tests.support.waiting import poll

pytestmark = pytest.mark.live
BALL = spec(GAUSS_4D, name="stages", transforms=[{"kind": "unit_ball", "radius": 1.0}],
            integrand={"kind": "gaussian_peak", "sigma": 0.3, "u": [0.0] * 4},
            batching={"fuse": False})
TIMEOUT = 60


workspace_fixture, fleet_fixture = module_fixtures(1)


@pytest.fixture(scope="module")
def app(redis_server: RedisServer) -> Iterator[Celery]:
    import mainboard.tasks.stages  # noqa: F401 - registers the shared tasks

    celery_app = make_app(broker_url=redis_server.url)
    yield celery_app
    celery_app.close()


@pytest.fixture
def r(redis_server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(redis_server.url)


def published(r: redis.Redis, data: dict[str, Any], run_id: str) -> tuple[Run, Sampler]:
    """What a coordinator does before iteration 0: the run and its sampler, in Redis."""
    run = build_run(data)
    sampler = run.new_sampler()
    for key in r.scan_iter(match=keys.run_pattern(run_id)):
        r.delete(key)
    publish_run(r, run_id, run.spec.model_dump(mode="json"))
    r.set(keys.iteration_sampler(run_id, 0), codec.dumps(sampler.snapshot()))
    return run, sampler


def call(app: Celery, stage: str, *args: Any) -> dict[str, Any]:
    return app.tasks[STAGE_PREFIX + stage].delay(*args).get(timeout=TIMEOUT)


def test_each_stage_task_is_callable_with_delay(app: Celery, fleet: LocalWorkers,
                                                r: redis.Redis) -> None:
    run_id = "stages-one-by-one"
    run, sampler = published(r, BALL, run_id)
    latent = call(app, "sample", run_id, 0, 0, 2000)
    assert latent["ref"] == {"run": run_id, "iteration": 0, "batch": 0, "n": 2000, "attempt": 0}
    assert latent["latent"] == {"run_seed": 11, "iteration": 0, "batch_index": 0, "n": 2000}

    cube = call(app, "materialize", latent)
    points = unpack_batch(cube["batch"])
    x, w = points.x, points.weights
    assert x.shape == (2000, 4) and x.dtype == np.float64 and w.shape == (2000,)
    assert 0 <= x.min() and x.max() < 1 and (w > 0).all()
    local = stages.materialize(run, sampler, stages.sample(run, sampler, 0, 0, 2000))
    assert np.array_equal(x, local.x) and x.strides == local.x.strides  # layout kept too

    ball = call(app, "transform", cube)
    assert (np.linalg.norm(unpack_batch(ball["batch"]).x, axis=1) <= 1 + 1e-12).all()

    evaluated = call(app, "evaluate", ball)
    expected = process_batch(run, sampler, 0, 0, 2000)
    partial = evaluated["result"]["partial"]
    assert partial["samples"] == 2000
    assert np.array_equal(partial["mean"], expected.partial.mean)  # bit-identical to local
    assert np.array_equal(partial["m2"], expected.partial.m2)
    assert set(evaluated["result"]["training"]) == {"grid_sum", "grid_count"}

    assert call(app, "accumulate", evaluated)["stored"] is True
    assert r.lrange(keys.iteration_done(run_id, 0), 0, -1) == [b"0"]

    fused = call(app, "fused", call(app, "sample", run_id, 0, 1, 500))
    assert fused["stored"] is True
    stored = codec.loads(r.hget(keys.iteration_results(run_id, 0), "1"))
    assert np.array_equal(stored["partial"]["mean"],
                          process_batch(run, sampler, 0, 1, 500).partial.mean)


def test_a_redelivered_result_is_stored_once(app: Celery, fleet: LocalWorkers,
                                             r: redis.Redis, redis_server: RedisServer) -> None:
    run_id = "stages-exactly-once"
    published(r, spec(GAUSS_4D, name="once"), run_id)
    evaluated = call(app, "evaluate", call(app, "materialize",
                                           call(app, "sample", run_id, 0, 3, 1000)))
    first = call(app, "accumulate", evaluated)
    again = call(app, "accumulate", evaluated)  # what a redelivery does
    assert first["stored"] is True
    assert again["stored"] is False and "already stored" in again["skipped"]
    assert r.hlen(keys.iteration_results(run_id, 0)) == 1
    assert r.lrange(keys.iteration_done(run_id, 0), 0, -1) == [b"3"]

    # two deliveries racing past the early check: the set-if-absent write still wins once
    ref = BatchRef(run_id, 0, 4, 1000, attempt=0)
    racers = [StageContext(redis_server.url, BatchRef(**{**ref.to_dict(), "attempt": a}),
                           "accumulate", "racer") for a in (0, 1)]
    assert [c.store_result(evaluated["result"]) for c in racers] == [True, False]
    assert r.lrange(keys.iteration_done(run_id, 0), 0, -1) == [b"4", b"3"]

    r.delete(keys.iteration_sampler(run_id, 0))  # the iteration is merged: late writes vanish
    late = StageContext(redis_server.url, BatchRef(run_id, 0, 5, 1000), "accumulate", "late")
    assert late.store_result(evaluated["result"]) is False
    assert not r.hexists(keys.iteration_results(run_id, 0), "5")


def test_the_pause_check_stakes_the_claim_in_its_round_trip_and_takes_it_back_on_a_halt(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampling task's first three round trips (the iteration's sampler, is the run
    pausing? claim the attempt) are one: the claim is staked with the check, held while the
    task runs, and gone again when the run halts, its batches parked, or when the batch is
    stale."""
    r = redis.Redis.from_url(redis_server.url)
    run_id = "stages-hold-claim"
    published(r, spec(GAUSS_4D, name="hold-claim"), run_id)
    ctx = StageContext(redis_server.url, BatchRef(run_id, 0, 6, 1000), "fused", "holder")
    claim_key = keys.batch_claim(run_id, 0, 6, 0)
    held = ctx.claim()
    trips: list[Any] = []  # what goes to Redis: one pipeline, no command of its own
    execute, command = redis.client.Pipeline.execute, redis.Redis.execute_command
    monkeypatch.setattr(redis.client.Pipeline, "execute",
                        lambda pipe, *a, **k: trips.append("pipeline") or execute(pipe, *a, **k))
    monkeypatch.setattr(redis.Redis, "execute_command",
                        lambda client, *a, **k: trips.append(a[0]) or command(client, *a, **k))
    ctx.load(check_stored=False, hold=(6, 7), claim=held)
    monkeypatch.undo()
    assert trips == ["pipeline"]
    assert ctx.sampler is not None and held.staked and r.get(claim_key) == held.holder.encode()
    assert 0 < r.pttl(claim_key) <= 3000
    with held:  # entering does not set it again; leaving stops the heartbeat
        assert r.exists(claim_key)
    r.delete(claim_key)
    r.hset(keys.run_state(run_id), "control", "pause")
    halted = ctx.claim()
    with pytest.raises(Skip, match="pauses or stops"):
        ctx.load(check_stored=False, hold=(6, 7), claim=halted)
    assert not r.exists(claim_key)
    assert r.lrange(keys.iteration_done(run_id, 0), 0, -1) == [b"p:7", b"p:6"]
    r.hdel(keys.run_state(run_id), "control")
    late = StageContext(redis_server.url, BatchRef(run_id, 1, 8, 1000), "fused", "holder")
    stale = late.claim()  # iteration 1 was never published here: not live
    with pytest.raises(Skip, match="no longer live"):
        late.load(check_stored=False, hold=(8,), claim=stale)
    assert stale.staked and not r.exists(keys.batch_claim(run_id, 1, 8, 0))


def test_one_heartbeat_keeps_every_claim_of_a_process_alive_and_none_after_its_release(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Claims held at once are refreshed by the process's one heartbeat thread (not a thread
    each); once released, a claim is never set again and runs out."""
    monkeypatch.setattr(claims, "HEARTBEAT_S", 0.01)
    monkeypatch.setattr(claims, "CLAIM_TTL_MS", 400)
    r = redis.Redis.from_url(redis_server.url)
    held = [Claim(r, f"stages-heartbeat-{i}", "holder") for i in range(2)]
    with held[0], held[1]:
        for claim in held:  # a beat: the key's time to live went back up
            lowest = [r.pttl(claim.key)]

            def beat(key: str = claim.key, lowest: list[int] = lowest) -> bool:
                now = r.pttl(key)
                risen, lowest[0] = now > lowest[0], min(lowest[0], now)
                return risen

            poll(beat, 30, f"a heartbeat refreshing {claim.key}", every=0.001)
        beaters = [t for t in threading.enumerate() if t.name == "claims heartbeat"]
        assert len(beaters) == 1
    left = [r.pttl(c.key) for c in held]
    while any(r.exists(c.key) for c in held):  # released: each only runs out
        now = [r.pttl(c.key) for c in held]
        assert all(n <= was for n, was in zip(now, left, strict=True)), (now, left)
        left = now


@pytest.mark.parametrize(("target", "stage", "cause"), [
    ("wrong_shape", "evaluate", r"returned shape \(2000, 2\), expected \(2000,\)"),
    ("wrong_dtype", "evaluate", r"returned dtype str\d*, expected a real or complex"),
    ("explode", "evaluate", r"ZeroDivisionError: integrand exploded on purpose"),
])
def test_bad_integrand_fails_the_run_and_the_worker_survives(
        target: str, stage: str, cause: str, workspace: Config, fleet: LocalWorkers) -> None:
    bad = spec(GAUSS_4D, name=f"bad-{target}", batching={"batch_size": 2000},
               integrand={"kind": "python", "target": f"tests.support.run_integrands:{target}"})
    with pytest.raises(IntegrationFailed) as failure:
        mainboard.integrate(bad, workers=0, config=workspace)
    message = str(failure.value)
    assert f"failed at stage '{stage}'" in message
    # every batch fails; the first failure to reach the coordinator names its batch
    named = re.search(r"batch (\d+) of iteration 0", message)
    assert named and "tests.support.run_integrands" in message, message
    batch = int(named.group(1))
    assert re.search(cause, message), message
    receipt = RunStore(workspace.state_dir).receipts(load_spec(bad).run_id())
    failed = receipt.last(RunFailed.topic)
    assert isinstance(failed, RunFailed) and failed.stage == stage and failed.batch == batch
    # the worker's error line and the coordinator's are in the run's log (`runs logs`)
    handle = mainboard.run(load_spec(bad).run_id(), workspace)
    deadline = time.monotonic() + 60  # a hang guard: the event is the lines
    while len(errors := [x for x in handle.logs(level="error") if x.batch == batch]) < 2:
        assert time.monotonic() < deadline, [x.text() for x in handle.logs()]
        time.sleep(0.1)
    assert {x.worker.partition("-")[0] for x in errors} >= {"fleet", "coordinator"}
    assert any(f"stage {stage} failed" in x.message and re.search(cause, x.message)
               for x in errors if x.worker != "coordinator"), errors

    assert fleet.procs[0].poll() is None  # the worker is alive and serves the next run
    good = mainboard.integrate(spec(GAUSS_4D, name="after-bad"), workers=0, config=workspace)
    assert good.samples == 120_000


def test_integrand_missing_on_the_worker_fails_at_load(workspace: Config, fleet: LocalWorkers,
                                                       tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator can import the target, the worker cannot (code not deployed there)."""
    (tmp_path / "only_here.py").write_text("def f(x):\n    return x[:, 0]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = spec(GAUSS_4D, name="not-deployed",
               integrand={"kind": "python", "target": "only_here:f"})
    with pytest.raises(IntegrationFailed, match=r"failed at stage 'sample' on worker fleet-.*"
                       r"ConfigError: .*cannot import module 'only_here'"):
        mainboard.integrate(run, workers=0, config=workspace)


def test_unimportable_target_is_a_user_error_before_any_dispatch(workspace: Config) -> None:
    run = spec(GAUSS_4D, integrand={"kind": "python", "target": "tests.support.run_integrands:nope"})
    with pytest.raises(ConfigError, match=r"integrand.target: module 'tests.support.run_integrands' "
                       r"has no attribute 'nope'"):
        mainboard.integrate(run, workers=0, config=workspace)


def test_stage_tasks_are_importable_without_a_broker() -> None:
    """`import mainboard.tasks` connects nowhere and stays cheap."""
    code = ("import sys, mainboard.tasks as t\n"
            "assert 'celery' not in sys.modules and 'numpy' not in sys.modules, "
            "sorted(m for m in sys.modules if m.split('.')[0] in ('celery', 'numpy'))\n"
            "print(t.BATCH_QUEUE, t.COORDINATOR_QUEUE)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1], timeout=60,
                          env={"PATH": "/usr/bin:/bin", "MAINBOARD_BROKER_URL": "redis://x:1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["mainboard.batches", "mainboard.coordinator"]
