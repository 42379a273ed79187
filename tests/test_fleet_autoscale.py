"""Live tier: the fleet keeper autoscales a pool of local workers (issue 19).

`fleet up --pool auto` starts nothing (min_jobs 0: no allocation before work); tasks put
in the pool's queue make the keeper submit workers (at most max_jobs, one pending at a
time); once the queue is drained and the workers idled past idle_timeout they retire
(warm shutdown) and the pool is back to zero. Every decision is a `fleet.scale` receipt
with its reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mainboard.fleet.autoscale import SCALE_TICK_ENV
from mainboard.fleet.records import read_fleet
from tests.fleet_helpers import cli, config, stop_broker, wait_until, workspace

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]

POOL = """
[fleet.pools.auto]
host = "local"
queues = ["t19.auto"]
max-jobs = 2
backlog = 1
idle-timeout = 2
"""


def _send(ws: Path, n: int) -> list:
    from mainboard.fleet.workers import broker_route
    from mainboard.tasks.app import make_app
    from mainboard.tasks.fleet import PROBE_TASK

    route = broker_route(config(ws), start=False)
    assert route is not None
    app = make_app(broker_url=route.url)
    return [app.send_task(PROBE_TASK, kwargs={"sleep_s": 1.0}, queue="t19.auto")
            for _ in range(n)]


def test_a_pool_scales_up_with_queued_work_and_back_to_zero_when_idle(tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws", POOL)
    env = {SCALE_TICK_ENV: "0.5"}
    try:
        up = cli(ws, "fleet", "up", "--pool", "auto", "--no-flower", "--json", env=env)
        assert up.returncode == 0, up.stderr
        assert json.loads(up.stdout)["started"] == []  # no work yet: no allocation
        results = _send(ws, 4)
        try:
            ran = [r.get(timeout=120) for r in results]
        finally:
            results[0].app.close()
        assert {r["worker_id"] for r in ran} <= set(read_fleet(ws / ".mainboard").started)
        wait_until(lambda: not [w for w in read_fleet(ws / ".mainboard").live()
                                if w.pool == "auto"], 90, "the pool back to zero")
        events = read_fleet(ws / ".mainboard").scale
        actions = [e.action for e in events]
        assert actions[0] == "start" and "submit" in actions and "retire" in actions, actions
        submits = [e for e in events if e.action == "submit"]
        assert 1 <= len(submits) <= 2 and all("task(s) queued" in e.reason for e in submits)
        assert all(e.reason for e in events)
        assert "submit_failed" not in actions
    finally:
        cli(ws, "fleet", "down")
        stop_broker(ws)
