"""Live tier: the autoscaler against a real SLURM (issue 19 scenarios, small budgets).

One fleet, two pools. ``burst`` (max_jobs 4, backlog 2, idle_timeout 5 s): 200 short
tasks; sampled every second, SLURM never holds more than 2 of its allocations pending
nor 4 running; every task runs once; the queue drains; idle_timeout + 10 s after the
last result no allocation of the fleet is left. ``nopart`` names a partition that does
not exist: a task queued for it makes at most 3 sbatch calls (counted by a wrapper on
that host's PATH), then the pool is paused with one line.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from mainboard.fleet.autoscale import SCALE_TICK_ENV
from mainboard.fleet.records import owner_prefix, read_fleet
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.fleet_helpers import (
    HOST_PYTHON,
    provisioned_root,  # noqa: F401 - session fixture
    send_tasks,
    table,
    tear_down,
    up_ok,
    workspace,
)
from tests.support.services import SlurmCluster

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]
TASKS, IDLE_S = 200, 5


def _timeline(ws: Path, last: float) -> str:
    """The fleet's decisions and stops, in seconds relative to the last task's result."""
    import json

    shift = time.time() - time.monotonic()
    lines = []
    for line in (ws / ".mainboard" / "fleet.ndjson").read_text().splitlines():
        record = json.loads(line)
        if record["topic"] in ("fleet.scale", "worker.stopped", "worker.started"):
            payload = record["payload"]
            what = payload.get("action") or record["topic"]
            lines.append(f"{record['ts'] - shift - last:+7.1f} {what} "
                         f"{payload.get('worker_ids') or payload.get('worker_id')}")
    return "no allocation left idle_timeout + 10 s after the last task:\n" + "\n".join(lines)


def _allocations(slurm: SlurmCluster, prefix: str) -> Counter[str]:
    """The fleet's jobs slurmctld holds now, by state (PENDING, RUNNING, ...)."""
    out = subprocess.run(["squeue", "-h", "-o", "%k|%T"], env=slurm.env, capture_output=True,
                         text=True, check=True).stdout
    return Counter(state for comment, _, state in (line.partition("|") for line in out.split())
                   if comment.startswith(prefix))


def _sbatch_counter(directory: Path) -> tuple[str, Path]:
    """A PATH whose ``sbatch`` logs each call, then runs the real one."""
    directory.mkdir()
    calls = directory / "calls"
    wrapper = directory / "sbatch"
    wrapper.write_text(f"#!/bin/sh\necho call >> {calls}\nexec /usr/bin/sbatch \"$@\"\n")
    wrapper.chmod(0o755)
    return f"{directory}:{os.environ['PATH']}", calls


def test_burst_within_limits_drains_and_scales_to_zero_bad_partition_pauses(
        tmp_path: Path, slurm_cluster: SlurmCluster, provisioned_root: Path) -> None:  # noqa: F811
    path, calls = _sbatch_counter(tmp_path / "wrap")
    batch = dict(root=str(provisioned_root), python=HOST_PYTHON)
    ws = workspace(
        tmp_path / "ws",
        table("hosts.cluster", kind="slurm", partition="debug", **batch,
              env={"SLURM_CONF": str(slurm_cluster.conf)}),
        table("hosts.nowhere", kind="slurm", partition="nope", **batch,
              env={"SLURM_CONF": str(slurm_cluster.conf), "PATH": path}),
        table("fleet.pools.burst", host="cluster", queues=["t19s.burst"], max_jobs=4,
              backlog=2, idle_timeout=IDLE_S),
        table("fleet.pools.nopart", host="nowhere", queues=["t19s.nope"], max_jobs=2))
    env = {SCALE_TICK_ENV: "0.5"}
    app = None
    try:
        up_ok(ws, "--no-flower", env=env)
        prefix = owner_prefix(ws / ".mainboard")
        send_tasks(ws, "t19s.nope", 1, 0.1)[0].app.close()
        results = send_tasks(ws, "t19s.burst", TASKS, 0.1)
        app = results[0].app
        samples: list[Counter[str]] = []
        done: list[dict] = []
        while len(done) < TASKS:
            samples.append(_allocations(slurm_cluster, prefix))
            done = [r.get() for r in results if r.ready()]
            assert len(samples) < 240, f"{len(done)} of {TASKS} tasks after 240 samples"
            time.sleep(1.0)
        last = time.monotonic()
        deadline = last + IDLE_S + 10
        while _allocations(slurm_cluster, prefix) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not _allocations(slurm_cluster, prefix), _timeline(ws, last)
        print(f"\nscaled to zero {time.monotonic() - last:.1f} s after the last task; "
              f"{len(samples)} samples, most running {max(s['RUNNING'] for s in samples)}")
    finally:
        if app is not None:
            app.close()
        down = tear_down(ws, "--timeout", "10")
    assert down.returncode == 0, down.stderr
    assert all(s["PENDING"] <= 2 and s["RUNNING"] <= 4 for s in samples), samples
    assert max(s["RUNNING"] for s in samples) > 1  # it did scale out
    ids = [r["task_id"] for r in done]
    assert len(ids) == len(set(ids)) == TASKS  # every task ran once
    burst = [e for e in read_fleet(ws / ".mainboard").scale if e.pool == "burst"]
    assert [e for e in burst if e.action == "retire"], "idle workers retired (warm shutdown)"
    nope = [e.action for e in read_fleet(ws / ".mainboard").scale if e.pool == "nopart"]
    assert nope == ["start", "submit_failed", "submit_failed", "submit_failed", "pause",
                    "stop"], nope  # (stop: fleet down)
    assert len(calls.read_text().splitlines()) == 3  # at most 3 sbatch calls, then paused
    (pause,) = [e for e in read_fleet(ws / ".mainboard").scale if e.action == "pause"]
    assert "\n" not in pause.reason and "fleet resume-pool nopart" in pause.reason

