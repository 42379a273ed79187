"""Stale results (issue 31, item 6): result writes carry the run's owner generation.

Every coordinator that takes a run over (a fresh start, a resume) is a new generation; its
messages carry it, and the store scripts refuse (and count in the run's state) a result
sent under an older one. Live: a run paused at iteration 2 is resumed (generation 2);
while the resumed coordinator sends that iteration, a worker of the first coordinator
stores its result for the same batches (here: a wrong one, so merging it would show): it is
refused and counted (``runs show --json``, the run's log), and the resumed run ends with
the numbers of an uninterrupted run with the same seed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

import mainboard
from mainboard import keys
from mainboard.config import Config
from mainboard.integrators.driver import integrate_local
from mainboard.tasks import dispatch
from mainboard.tasks.bundles import Bundle, store_bundle
from mainboard.tasks.codec import dumps
from mainboard.tasks.workers import LocalWorkers
from tests.support.cliserver import run_mainboard
from tests.support.integration import GAUSS_4D, module_fixtures, same_numbers, spec
from tests.support.services import RedisServer

RUN = spec(GAUSS_4D, name="generations", stop={"max_samples": 36_000},
           batching={"batch_size": 2_000, "batches_per_iteration": 6, "max_bundle": 3})


workspace_fixture, fleet_fixture = module_fixtures(1)


def test_a_write_of_an_older_generation_is_refused_and_counted(
        redis_server: RedisServer) -> None:
    """The store script alone, on a real Redis: generation 1 refused once generation 2
    owns the run (every member counted), generation 2 stored, a hand-sent 0 not checked."""
    r = redis.Redis.from_url(redis_server.url)
    run = "gen-unit"
    r.delete(keys.run_state(run), keys.iteration_results(run, 0))
    r.set(keys.iteration_sampler(run, 0), b"s")
    r.hset(keys.run_state(run), "generation", 2)
    stale = store_bundle(r, run, 0, 0, 0, [(0, b"old"), (1, b"old")], 0.1, "w", gen=1)
    assert stale == -2 and not r.exists(keys.iteration_results(run, 0))
    assert r.hget(keys.run_state(run), "stale_refused") == b"2"
    assert store_bundle(r, run, 0, 0, 1, [(0, b"new")], 0.1, "w", gen=2) == 1
    assert store_bundle(r, run, 0, 1, 0, [(1, b"hand")], 0.1, "w") == 1  # gen 0: by hand
    assert r.hgetall(keys.iteration_results(run, 0)) == {b"0": b"new", b"1": b"hand"}


def test_a_chained_runs_last_stage_of_an_older_generation_is_refused_and_counted(
        redis_server: RedisServer) -> None:
    from mainboard.tasks.context import BatchRef, StageContext

    r = redis.Redis.from_url(redis_server.url)
    run = "gen-chain"
    r.delete(keys.run_state(run), keys.iteration_results(run, 0))
    r.set(keys.iteration_sampler(run, 0), b"s")
    r.hset(keys.run_state(run), "generation", 3)
    old = StageContext(redis_server.url, BatchRef(run, 0, 4, 10, 0, gen=2), "evaluate", "old")
    assert not old.store_result({"x": 1})
    assert r.hget(keys.run_state(run), "stale_refused") == b"1"
    assert not r.exists(keys.iteration_results(run, 0))
    now = StageContext(redis_server.url, BatchRef(run, 0, 4, 10, 1, gen=3), "evaluate", "now")
    assert now.store_result({"x": 2}) and r.hexists(keys.iteration_results(run, 0), "4")


@pytest.mark.live
@pytest.mark.timeout(180)
def test_a_resumed_run_refuses_the_earlier_coordinators_results_and_ends_bit_identical(
        workspace: Config, fleet: LocalWorkers, redis_server: RedisServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    r = redis.Redis.from_url(redis_server.url)
    original = dispatch.Dispatch._send_bundle
    seen: dict[str, Any] = {"stale": None}

    def pause_at_iteration_2(self: Any, k: int, unit: Bundle, sizes: Any, attempt: int) -> None:
        if k == 1:  # the first coordinator: its workers park iteration 2 (the run pauses)
            r.hset(keys.run_state(self.run_id), "control", "pause")
        original(self, k, unit, sizes, attempt)

    monkeypatch.setattr(dispatch.Dispatch, "_send_bundle", pause_at_iteration_2)
    paused = mainboard.integrate(RUN, workers=0, config=workspace)
    assert paused.stop_reason == "paused" and paused.iterations == 1

    def stale_worker_first(self: Any, k: int, unit: Bundle, sizes: Any, attempt: int) -> None:
        if seen["stale"] is None:  # what a worker of generation 1 stores now, before ours
            wrong = dumps({"garbage": True})
            seen["gen"], seen["members"] = self.gen, len(unit.members)
            seen["stale"] = store_bundle(r, self.run_id, k, unit.lead, 7,
                                         [(i, wrong) for i in unit.members], 0.1,
                                         "old|1|0", gen=self.gen - 1)
        original(self, k, unit, sizes, attempt)

    monkeypatch.setattr(dispatch.Dispatch, "_send_bundle", stale_worker_first)
    resumed = mainboard.integrate(RUN, workers=0, config=workspace, resume=True)
    stale = seen.pop("members")
    assert seen == {"stale": -2, "gen": 2} and stale >= 1
    same_numbers(resumed, integrate_local(mainboard.tasks.runner.load_spec(RUN)))

    shown = run_mainboard(["--config", str(workspace.path), "runs", "show", "generations",
                           "--json"], timeout=60, cwd=workspace.root)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["stale_refused"] == stale  # each member of the bundle
    logs = run_mainboard(["--config", str(workspace.path), "runs", "logs", "generations"],
                         timeout=60, cwd=workspace.root)
    assert f"{stale} result write(s) sent by an earlier coordinator of this run refused, " \
           "not merged (owner generation now 2)" in logs.stdout, logs.stdout + logs.stderr
