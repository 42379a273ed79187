"""Live tier: a worker inside a SLURM allocation retires before its walltime.

Walltime 2 minutes, retire-before 60 s: the worker reads its allocation's end from squeue
and retires by its own clock 60 s before it (issue 19: SLURM's ``--signal`` fires up to
60 s early, once before the run began, so it is only a backstop at 30 s), the worker
stops taking tasks, finishes the one in hand, and exits; the job ends COMPLETED, never
TIMEOUT, and the task's result arrives.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from mainboard.fleet.records import read_fleet
from tests.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.fleet_helpers import (
    HOST_PYTHON,
    assert_nothing_left,
    cli,
    nodes_of,
    provisioned_root,  # noqa: F401 - session fixture
    send_probe,
    status,
    stop_broker,
    table,
    up_ok,
    wait_until,
    workspace,
)
from tests.services import SlurmCluster

pytestmark = [pytest.mark.live, pytest.mark.timeout(400)]


def test_worker_retires_before_walltime_and_finishes_its_task(
        tmp_path: Path, slurm_cluster: SlurmCluster, provisioned_root: Path) -> None:  # noqa: F811
    ws = workspace(tmp_path / "ws", table(
        "hosts.cluster", kind="slurm", partition="debug", root=str(provisioned_root),
        python=HOST_PYTHON, env={"SLURM_CONF": str(slurm_cluster.conf)}))
    up_ok(ws, "--on", "cluster", "--walltime", "2m", "--retire-before", "60s", "--no-flower")
    try:
        _retire(ws, tmp_path, slurm_cluster)
    finally:
        rows = status(ws, "--all")
        down = cli(ws, "fleet", "down")
        stop_broker(ws)
    assert down.returncode == 0 and down.stdout.strip().endswith("completed"), down.stdout
    assert_nothing_left(ws, nodes_of(rows))


def _logs(job_dir: Path) -> str:
    return "".join((job_dir / name).read_text() for name in ("stdout", "stderr")
                   if (job_dir / name).exists())


def _retire(ws: Path, tmp_path: Path, slurm: SlurmCluster) -> None:
    worker = read_fleet(ws / ".mainboard").live()[0]
    job_dir = Path(worker.job["job_dir"])
    assert "#SBATCH --signal=B:INT@30" in (job_dir / "job.sh").read_text()  # the backstop
    rows = wait_until(lambda: (r := status(ws)) and r[0]["online"] and r, 60, "worker online")
    started = time.monotonic()
    release = tmp_path / "release"
    result = send_probe(ws, "cluster", sleep_s=150, until_path=str(release))
    try:
        wait_until(lambda: "Warm shutdown" in _logs(job_dir), 90,
                   "the worker starting its retirement")
        assert not result.ready(), "the task must still be in flight when retirement starts"
        said = re.search(r"retiring: allocation \S+ ends at \S+, (\d+) s from now",
                         _logs(job_dir))
        assert said and 50 <= int(said.group(1)) <= 60, _logs(job_dir)[-2000:]  # not early
        release.touch()
        found = result.get(timeout=60)
    finally:
        result.app.close()
    assert found["node"] == rows[0]["node"] and found["job_id"] == worker.job["job_id"]
    done = wait_until(lambda: (r := status(ws)) and r[0]["job_state"] == "completed" and r, 60,
                      "the job to end")
    assert done[0]["state"] == "completed" and time.monotonic() - started < 120
    native = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%T", "-j", worker.job["job_id"]],
                            env=slurm.env, capture_output=True, text=True).stdout.strip()
    assert native == "COMPLETED", native  # not TIMEOUT: nothing was killed at walltime
    assert (job_dir / "exit_code").read_text().strip() == "0"
