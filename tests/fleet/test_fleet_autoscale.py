"""Live tier: the fleet keeper autoscales two pools of one fleet (issue 19).

`auto` (local workers): `fleet up` starts nothing (min_jobs 0: no allocation before
work); tasks in its queue make the keeper submit a worker (max_jobs 1); once the queue
is drained and the worker idled past idle_timeout it retires (warm shutdown) and the
pool is back to zero. `doomed` (a host that refuses connections): 3 failed submissions,
then the pool is paused with one line and nothing more is submitted until
`fleet resume-pool`. Every decision is a `fleet.scale` receipt with its reason.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from mainboard.errors import UserError
from mainboard.fleet.autoscale import SCALE_TICK_ENV
from mainboard.fleet.control import resume_pool
from mainboard.fleet.records import read_fleet
from tests.support.fleet_helpers import (
    cli,
    config,
    stop_broker,
    table,
    tear_down,
    wait_keeper_looks,
    wait_until,
    workspace,
)
from tests.support.services import free_port

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]

POOLS = """
[fleet.pools.auto]
host = "local"
queues = ["t19.auto"]
max-jobs = 1
idle-timeout = 1

[fleet.pools.steady]
host = "local"
queues = ["t19.steady"]
jobs = 1

[fleet.pools.doomed]
host = "gone"
queues = ["t19.doomed"]
max-jobs = 2
"""


def _send(ws: Path, queue: str, n: int) -> list:
    from mainboard.fleet.workers import broker_route
    from mainboard.tasks.app import make_app
    from mainboard.tasks.fleet import PROBE_TASK

    route = broker_route(config(ws), start=False)
    assert route is not None
    app = make_app(broker_url=route.url)
    return [app.send_task(PROBE_TASK, kwargs={"sleep_s": 0.5}, queue=queue) for _ in range(n)]


def _events(ws: Path, pool: str) -> list:
    return [e for e in read_fleet(ws / ".mainboard").scale if e.pool == pool]


def test_pools_scale_up_with_work_back_to_zero_when_idle_and_pause_after_3_failures(
        tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws", table("hosts.gone", kind="ssh", host="127.0.0.1",
                                          port=free_port(), user="nobody"), POOLS)
    env = {SCALE_TICK_ENV: "0.2"}
    down = None
    try:
        up = cli(ws, "fleet", "up", "--no-flower", "--json", env=env)
        assert up.returncode == 0, up.stderr
        started = json.loads(up.stdout)["started"]  # steady's one; auto: no work, none
        assert [w["host"] for w in started] == ["local"]
        assert started[0]["node"].startswith("local-local-")  # <kind>-<host>-<job id>
        _send(ws, "t19.doomed", 1)[0].app.close()
        results = _send(ws, "t19.auto", 3)
        try:
            ran = [r.get(timeout=120) for r in results]
        finally:
            results[0].app.close()
        assert {r["worker_id"] for r in ran} <= set(read_fleet(ws / ".mainboard").started)
        wait_until(lambda: _events(ws, "auto")[-1].action == "retire", 90,
                   "the auto pool retiring its idle worker")
        auto = _events(ws, "auto")
        assert [e.action for e in auto] == ["start", "submit", "running", "retire"], auto
        # the keeper may tick between the three sends: it says the depth it saw (1 to 3)
        assert 1 <= auto[1].queue_depth <= 3, auto[1]
        assert f"{auto[1].queue_depth} task(s) queued" in auto[1].reason, auto[1]
        assert "idle past idle_timeout" in auto[3].reason
        assert auto[2].wait_s is not None and auto[2].wait_s >= 0  # its queue wait, learned

        actions = [e.action for e in _events(ws, "doomed")]
        assert actions == ["start", "submit_failed", "submit_failed", "submit_failed", "pause"]
        pause = _events(ws, "doomed")[-1]
        assert "mainboard fleet resume-pool doomed" in pause.reason and "\n" not in pause.reason
        assert all("gone: cannot reach" in e.reason for e in _events(ws, "doomed")[1:4])
        pools = cli(ws, "fleet", "status", "--pools", "--json")
        assert pools.returncode == 0, pools.stderr
        rows = {r["pool"]: r for r in json.loads(pools.stdout)}
        assert rows["doomed"]["paused"] and rows["doomed"]["queue_depth"] == 1
        assert rows["doomed"]["target"] == 1 and rows["doomed"]["pending"] == 0
        assert rows["auto"]["queue_depth"] == 0 and rows["auto"]["autoscaled"]
        assert set(rows["auto"]) >= {"target", "pending", "running", "idle", "lost"}
        assert len(_events(ws, "doomed")) == 5  # nothing more is submitted while paused
        resume_pool(config(ws), "doomed")  # what `fleet resume-pool doomed` does
        wait_until(lambda: _events(ws, "doomed")[-1].action == "submit_failed", 30,
                   "a new submission after resume-pool")
        with pytest.raises(UserError, match="pool 'nope' is not declared; declared pools: "
                                            "auto, steady, doomed"):
            resume_pool(config(ws), "nope")
        _keeper_killed_then_worker_killed(ws)
        down = cli(ws, "fleet", "down")
        assert down.returncode == 0, down.stderr
        assert not read_fleet(ws / ".mainboard").live()  # back to zero allocations
    finally:
        if down is None:
            cli(ws, "fleet", "down")
        stop_broker(ws)


def _keeper_killed_then_worker_killed(ws: Path) -> None:
    """`steady` (jobs 1): started once by `fleet up`, never doubled by the keeper; the keeper
    SIGKILLed is started again by `fleet status`, finds the same allocation and submits
    nothing; its worker
    SIGKILLed is replaced (the new one online: the recovery time is printed)."""
    from mainboard.fleet.keeperclient import keeper_pid
    from mainboard.fleet.workers import broker_route, registry_entries

    state = ws / ".mainboard"
    (first,) = [w for w in read_fleet(state).live() if w.pool == "steady"]
    pid = keeper_pid(state)
    assert pid and pid > 0
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: keeper_pid(state) is None, 10, "the keeper gone")
    revived = cli(ws, "fleet", "status", "--json", env={SCALE_TICK_ENV: "0.2"})
    assert revived.returncode == 0, revived.stderr  # it starts the keeper again
    assert [r["worker_id"] for r in json.loads(revived.stdout)
            if r["worker_id"] == first.worker_id] == [first.worker_id]
    assert keeper_pid(state)
    route = broker_route(config(ws), start=False)
    entry = wait_until(lambda: registry_entries(route, [first.node]).get(first.node), 60,
                       "the steady worker registered")
    wait_keeper_looks(ws, 5)  # nothing submitted over 5 looks of the restarted keeper
    assert [w.worker_id for w in read_fleet(state).live() if w.pool == "steady"] == \
        [first.worker_id]
    assert not [e for e in _events(ws, "steady") if e.action == "submit"]
    os.kill(int(entry["pid"]), signal.SIGKILL)  # our own worker, by its pid
    began = time.monotonic()

    def replacement() -> object:
        new = [w for w in read_fleet(state).live() if w.pool == "steady"
               and w.worker_id != first.worker_id]
        return new and registry_entries(route, [new[0].node]).get(new[0].node)

    wait_until(replacement, 60, "a replacement worker online")
    print(f"\nsteady worker SIGKILLed -> replacement online in {time.monotonic() - began:.1f} s")
    assert first.worker_id in read_fleet(state).stopped
    # the submit receipt follows the replacement's start record: wait for it, not read it
    (submit,) = wait_until(lambda: [e for e in _events(ws, "steady") if e.action == "submit"],
                           60, "the replacement's submit receipt")
    assert "0 allocation(s), target 1" in submit.reason


RUN_TOML = """name = "from-zero"
seed = 7
[domain]
continuous = 2
[integrand]
kind = "genz.gaussian"
a = [4.0, 4.0]
u = [0.5, 0.5]
[sampler]
kind = "vegas"
[stop]
max_samples = 8000
[batching]
batch_size = 2000
batches_per_iteration = 2
"""


def test_a_run_on_an_autoscaled_pool_at_zero_starts_its_worker(tmp_path: Path) -> None:
    """`--workers 0` with no worker yet is not refused when the keeper grows a pool that
    consumes the batch queue from zero: it says so, the run's batches are the demand, the
    pool submits a worker and the run ends with the numbers of a local run."""
    from mainboard.integrators.driver import integrate_local
    from mainboard.tasks.runner import load_spec

    ws = workspace(tmp_path / "ws", "\n[fleet.pools.runs]\nhost = \"local\"\n"
                                     "max-jobs = 1\nidle-timeout = 1\n")
    (ws / "run.toml").write_text(RUN_TOML)
    env = {SCALE_TICK_ENV: "0.2"}
    try:
        up = cli(ws, "fleet", "up", "--no-flower", "--json", env=env)
        assert up.returncode == 0 and json.loads(up.stdout)["started"] == [], up.stderr
        done = cli(ws, "integrate", "run.toml", "--workers", "0", "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert "pool 'runs' (autoscaled, up to 1 allocation(s) on local) starts one" \
            in done.stderr
        got = json.loads(done.stdout)
        ref = integrate_local(load_spec(ws / "run.toml"))
        assert (got["estimate"], got["samples"]) == (ref.estimate, 8000)
        runs = [e for e in read_fleet(ws / ".mainboard").scale if e.pool == "runs"]
        assert [e.action for e in runs][:2] == ["start", "submit"], runs
    finally:
        tear_down(ws)
