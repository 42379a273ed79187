"""Live tier: a SLURM pool hands over before walltime (issue 19, scenario e).

A pool of one 3-minute allocation (SLURM's time limit counts minutes) with retire-before
140 s (the handover comes 40 s in: the test does not wait out the allocation), fed 5 s
tasks without a pause. The worker reads its allocation's end from squeue and retires by
its own clock 140 s before it (SLURM's ``--signal`` fires up to 60 s early, so it is only
a backstop at 80 s); it writes that time into the registry, and the keeper's
autoscaler submits the replacement the pool's lead time earlier, so the replacement is
RUNNING before its predecessor has drained. Checked from SLURM's own record (``sacct -c``,
the jobcomp file): no fleet job ended TIMEOUT, the replacement started before its
predecessor ended; from the workers' logs and the results: no task ran twice, the task in
hand at retirement finished on the old worker. The test ends once the first handover is
verified.
"""

from __future__ import annotations

import gc
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from mainboard.fleet.autoscale import SCALE_TICK_ENV
from mainboard.fleet.records import read_fleet
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.fleet_helpers import (
    HOST_PYTHON,
    assert_nothing_left,
    cli,
    config,
    nodes_of,
    provisioned_root,  # noqa: F401 - session fixture
    status,
    stop_broker,
    table,
    up_ok,
    wait_until,
    workspace,
)
from tests.support.services import SlurmCluster

pytestmark = [pytest.mark.live, pytest.mark.timeout(420)]

QUEUE = "t19.wall"
TASK_S = 5.0
RETIRE_BEFORE_S = 140  # of a 3 min walltime: retirement 40 s in (a booting worker has time)


def _logs(job_dir: Path) -> str:
    return "".join((job_dir / name).read_text(errors="replace") for name in ("stdout", "stderr")
                   if (job_dir / name).exists())


def _sacct(slurm: SlurmCluster, job_ids: list[str]) -> dict[str, dict[str, str]]:
    """``{job id: {State, Start, End}}`` from SLURM's job completion record (``sacct -c``)."""
    out = subprocess.run(["sacct", "-c", "-n", "-P", "-o", "JobID,State,Start,End", "-j",
                          ",".join(job_ids)], env=slurm.env, capture_output=True, text=True,
                         timeout=30).stdout
    rows = (line.split("|") for line in out.splitlines() if line.count("|") == 3)
    return {r[0]: {"State": r[1], "Start": r[2], "End": r[3]} for r in rows}


class Feeder:
    """Keeps one TASK_S probe waiting in the pool's queue until stopped: work never pauses."""

    def __init__(self, ws: Path, release: Path) -> None:
        from mainboard.fleet.workers import broker_route
        from mainboard.tasks.app import make_app

        route = broker_route(config(ws), start=False)
        assert route is not None, "the broker is not running"
        self.app = make_app(broker_url=route.url)
        self.url, self.release = route.url, release
        self.sent: list[Any] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        import redis

        from mainboard import keys
        from mainboard.tasks.fleet import PROBE_TASK

        client = redis.Redis.from_url(self.url)
        try:
            while not self.stop.wait(0.5):
                if client.llen(keys.celery_queue(QUEUE)) < 1:
                    self.sent.append(self.app.send_task(
                        PROBE_TASK, queue=QUEUE,
                        kwargs={"sleep_s": TASK_S, "until_path": str(self.release)}))
        finally:
            client.close()


def test_a_pool_hands_over_before_walltime_without_timeout_or_a_task_run_twice(
        tmp_path: Path, slurm_cluster: SlurmCluster, provisioned_root: Path) -> None:  # noqa: F811
    ws = workspace(tmp_path / "ws", table(
        "hosts.cluster", kind="slurm", partition="debug", root=str(provisioned_root),
        python=HOST_PYTHON, env={"SLURM_CONF": str(slurm_cluster.conf)}), table(
        "fleet.pools.wall", host="cluster", queues=[QUEUE], walltime="3m",
        **{"retire-before": f"{RETIRE_BEFORE_S}s", "min-jobs": 1, "max-jobs": 1,
           "idle-timeout": "10m"}))
    env = {SCALE_TICK_ENV: "1"}
    up_ok(ws, "--no-flower", env=env)
    release = tmp_path / "release"
    feeder: Feeder | None = None
    try:
        wait_until(lambda: (r := status(ws)) and r[0]["online"], 90, "the first worker online")
        feeder = Feeder(ws, release)
        feeder.thread.start()
        _handover(ws, feeder, slurm_cluster)
    finally:
        if feeder is not None:
            feeder.stop.set()
            feeder.thread.join(10)
        release.touch()  # the task in hand ends now: `fleet down` drains at once
        rows = status(ws, "--all")
        down = cli(ws, "fleet", "down")
        if feeder is not None:  # results let go while their backend still answers
            feeder.sent.clear()
            gc.collect()
            feeder.app.close()
        stop_broker(ws)
    assert down.returncode == 0, down.stdout + down.stderr
    assert_nothing_left(ws, nodes_of(rows))


def _handover(ws: Path, feeder: Feeder, slurm: SlurmCluster) -> None:
    state = ws / ".mainboard"
    (first,) = read_fleet(state).live()
    first_dir = Path(first.job["job_dir"])
    backstop = RETIRE_BEFORE_S - 60
    assert f"#SBATCH --signal=B:INT@{backstop}" in (first_dir / "job.sh").read_text()
    second = wait_until(lambda: [w for w in read_fleet(state).started.values()
                                 if w.worker_id != first.worker_id], 180,
                        "the replacement submitted")[0]
    assert "Warm shutdown" not in _logs(first_dir), "the replacement must come before retiring"
    wait_until(lambda: "Warm shutdown" in _logs(first_dir), 120, "the first worker retiring")
    said = re.search(r"retiring: allocation \S+ ends at \S+, (\d+) s from now", _logs(first_dir))
    assert said and RETIRE_BEFORE_S - 10 <= int(said.group(1)) <= RETIRE_BEFORE_S, \
        _logs(first_dir)[-2000:]  # not early
    ids = [first.job["job_id"], second.job["job_id"]]
    done = wait_until(lambda: (s := _sacct(slurm, ids)).get(ids[0]) and s, 60,
                      "the first job in SLURM's completion record")
    first_end = done[ids[0]]["End"]
    running = subprocess.run(["squeue", "-h", "-o", "%T|%S", "-j", ids[1]], env=slurm.env,
                             capture_output=True, text=True, timeout=30).stdout.strip()
    state_, _, second_start = running.partition("|")
    assert state_ == "RUNNING" and second_start <= first_end, (running, done)
    print(f"handover: job {ids[1]} RUNNING since {second_start}, job {ids[0]} "
          f"({done[ids[0]]['State']}) ran {done[ids[0]]['Start']} to {first_end}")
    assert done[ids[0]]["State"] == "COMPLETED", done  # retired, never killed at walltime
    assert (first_dir / "exit_code").read_text().strip() == "0"
    # the replacement takes the work on: one task finished there, then the handover is done
    wait_until(lambda: any(r.ready() and r.result["job_id"] == ids[1] for r in feeder.sent),
               60, "a task done by the replacement")
    feeder.stop.set()
    feeder.thread.join(10)
    _each_task_once(feeder, [first_dir, Path(second.job["job_dir"])], ids)
    ended = _sacct(slurm, ids)
    assert not [j for j, row in ended.items() if row["State"] == "TIMEOUT"], ended


def _each_task_once(feeder: Feeder, job_dirs: list[Path], job_ids: list[str]) -> None:
    """Every probe any worker received, received once; each finished one finished where
    it was received (the one in hand at retirement on the old worker)."""
    received = [m for d in job_dirs
                for m in re.findall(r"Task mainboard\.fleet\.probe\[([0-9a-f-]+)\] received",
                                    _logs(d))]
    assert received and len(received) == len(set(received)), received
    sent = {r.id for r in feeder.sent}
    assert set(received) <= sent, (received, sent)
    finished = [r.result for r in feeder.sent if r.ready()]
    assert {f["job_id"] for f in finished} == set(job_ids), finished
    assert len({f["task_id"] for f in finished}) == len(finished)
