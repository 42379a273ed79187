"""Live tier: a stalled fleet worker is seen, said and restarted (issue 29, item 2).

The failure (celery #8030, #9054, #10205): after a broker reconnect a worker's main
process stays up and its heartbeat thread keeps beating, but no task ever starts again.
Reproduced here with the part that executes tasks frozen: the pool processes of a real
local fleet worker get SIGSTOP while the main process (its heartbeat, its consumer) runs
on. The worker beats, takes the one message its prefetch allows (it never starts), and the
rest of the run's batches wait in the queue: exactly what a user sees in the real case.

The keeper must say so (a ``worker.stalled`` receipt, a line in the run's log, ``fleet
status`` state ``stalled``), stop it through the stop machinery (the local bridge's
cancel: the same path as SLURM, PBS, rentals) and submit a replacement; the batch the
stalled worker held is re-sent, and the run ends with the local driver's numbers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

import mainboard
from mainboard import keys
from mainboard.fleet.autoscale import SCALE_TICK_ENV
from mainboard.fleet.keeperclient import keeper_pid
from mainboard.fleet.records import fleet_receipts, read_fleet
from mainboard.fleet.status import fleet_status
from mainboard.fleet.workers import broker_route, fleet_entries
from mainboard.integrators.driver import integrate_local
from mainboard.receipts import WorkerStalled
from mainboard.runs.logs import read_logs
from tests.support.fleet_helpers import (
    cli,
    config,
    stop_broker,
    tear_down,
    up_ok,
    wait_until,
    workspace,
)
from tests.support.integration import spec

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]

POOL = """
[fleet.pools.stally]
host = "local"
jobs = 1
stall-after = 3
"""
RUN = spec(name="stall-chained", seed=29, domain={"continuous": 2},
           integrand={"kind": "genz.gaussian", "a": [4.0, 4.0], "u": [0.45, 0.45]},
           stop={"max_samples": None, "max_iterations": 2},
           batching={"batch_size": 2_000, "batches_per_iteration": 6, "fuse": False})


def _children(pid: int) -> list[int]:
    """The worker's pool processes (its direct children)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _stalled_receipts(ws: Path) -> list[WorkerStalled]:
    found = fleet_receipts(ws / ".mainboard").read(WorkerStalled.topic)
    return [p for p in found if isinstance(p, WorkerStalled)]


def test_a_stalled_worker_is_shown_said_restarted_and_the_run_is_bit_identical(
        tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws", POOL)
    env = {SCALE_TICK_ENV: "0.2"}
    keeper = None
    try:
        up_ok(ws, "--no-flower", env=env)
        cfg = config(ws)
        route = broker_route(cfg, start=False)
        assert route is not None
        (first,) = read_fleet(ws / ".mainboard").live()
        entry = wait_until(lambda: fleet_entries(route, [first]).get(first.node, {}).get("pid"),
                           90, "the worker's first heartbeat")
        frozen = _children(int(entry))
        assert frozen, "a prefork worker has pool processes"
        # The keeper is held while the status is read: it would restart the worker as soon
        # as the status could call it stalled, and a look between two of its ticks races it.
        keeper = keeper_pid(ws / ".mainboard")
        assert keeper is not None
        os.kill(keeper, signal.SIGSTOP)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        out: dict[str, Any] = {}
        runner = threading.Thread(target=lambda: out.update(
            result=mainboard.integrate(RUN, workers=0, config=cfg)))
        runner.start()

        def seen_stalled() -> list[Any]:
            return [r for r in fleet_status(cfg, revive=False) if r.state == "stalled"]

        (row,) = wait_until(seen_stalled, 60, "fleet status showing the worker stalled")
        assert row.worker_id == first.worker_id and "task(s) wait" in row.reason
        os.kill(keeper, signal.SIGCONT)
        (said,) = wait_until(lambda: _stalled_receipts(ws), 60, "a worker.stalled receipt")
        assert said.worker_id == first.worker_id and said.pool == "stally"
        assert said.idle_s >= 3 and said.queue_depth > 0
        runner.join(180)
        assert not runner.is_alive(), "the run did not finish after the restart"
        expected = integrate_local(RUN)
        got = out["result"]
        assert (got.estimate, got.error, got.chi2_dof, got.samples, got.iterations) == \
            (expected.estimate, expected.error, expected.chi2_dof, expected.samples,
             expected.iterations)
        # the stop and the replacement's start are two receipts, written one after the other
        fleet = wait_until(lambda: (f := read_fleet(ws / ".mainboard")).stopped and f.live()
                           and f, 60, "the stalled worker recorded stopped and replaced")
        stop = fleet.stopped[first.worker_id]
        assert stop.lost and stop.reason.startswith("stalled: no task started for 3 s")
        (second,) = fleet.live()  # the replacement, submitted by the same decision
        assert second.worker_id != first.worker_id and second.pool == "stally"
        with redis.Redis.from_url(route.url) as client:
            (run_id,) = [r.decode() for r in client.zrevrange(keys.runs_index(), 0, 0)]
            lines = [x.message for x in read_logs(client, run_id)]
        assert any(f"worker {first.node}" in m and "stalled" in m for m in lines), lines
        # the batch the stalled worker held (its prefetched message) went out again
        assert any("batch re-sent as attempt" in m for m in lines), lines
        done = cli(ws, "fleet", "status", "--json")
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        assert [r["state"] for r in rows if r["worker_id"] == second.worker_id] == ["online"]
    finally:
        if keeper is not None:  # held above: a failure before it went on must not freeze it
            with contextlib.suppress(ProcessLookupError):
                os.kill(keeper, signal.SIGCONT)
        tear_down(ws, "--timeout", "10")
        stop_broker(ws)



def test_a_bad_stall_after_is_one_line_exit_2_and_nothing_starts(tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws", '[fleet.pools.p]\nhost = "local"\nstall-after = "soon"\n')
    done = cli(ws, "fleet", "up", "--no-flower")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "fleet.pools.p.stall-after: not a duration (got 'soon')" in line and "90s" in line
    assert not (ws / ".mainboard" / "fleet.ndjson").exists()
