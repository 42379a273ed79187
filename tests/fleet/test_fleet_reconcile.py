"""Live tier: a fleet controller SIGKILLed and restarted finds its allocations again.

Three pools of one allocation each: on the session's real SLURM, on its PBS wrappers
(qsub/qstat over the same SLURM) and on a loopback sshd.
The keeper is SIGKILLed and the fleet record loses its ``worker.started`` receipts (what
a controller killed between sbatch/ssh and writing the answer leaves); a job carrying
this workspace's owner tag that no receipt knows is put into SLURM too. ``fleet status``
(no keeper runs) reconciles: the same two worker ids with the same job ids, found by
their owner tag (SLURM ``--comment``, the PBS job name, the ssh job's exported tag); the
unknown jobs (one sbatch, one qsub) are cancelled; the restarted keeper submits nothing
(SLURM holds exactly one job of each batch pool, the ssh host one job directory). The provider case is in test_fleet_provider.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mainboard.fleet.autoscale import SCALE_TICK_ENV
from mainboard.fleet.records import owner_prefix, read_fleet
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.fleet_helpers import (
    HOST_PYTHON,
    cli,
    kill_keeper_and_lose_starts,
    provisioned_root,  # noqa: F401 - session fixture
    ssh_host,
    table,
    tear_down,
    up_ok,
    wait_keeper_looks,
    wait_until,
    workspace,
)
from tests.support.services import SlurmCluster, SshServer

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]


def _slurm_jobs(slurm: SlurmCluster, prefix: str) -> dict[str, str]:
    """Every job slurmctld remembers whose comment starts with ``prefix``: id -> state."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%k|%T"], env=slurm.env,
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split("|") for line in out.split()]
    return {i: state for i, comment, state in rows if comment.startswith(prefix)}


def _named_jobs(slurm: SlurmCluster, prefix: str) -> dict[str, str]:
    """Every job slurmctld remembers whose name starts with ``prefix`` (how PBS jobs carry
    the tag; qsub here is the wrapper over SLURM): id -> state."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%j|%T"], env=slurm.env,
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split("|") for line in out.split()]
    return {i: state for i, name, state in rows if name.startswith(prefix)}


def _tagged_dirs(root: Path, prefix: str) -> list[str]:
    """Job directories on the host root whose script exports this workspace's tag."""
    return sorted(p.parent.name for p in (root / ".mainboard" / "jobs").glob("*/job.sh")
                  if f"MAINBOARD_JOB_TAG={prefix}" in p.read_text())


def _job_dirs_seen(root: Path, prefix: str) -> str:
    """Each tagged job directory's pid and what ps says that pid runs (for a failure's
    message: the reconciler calls a process job alive when its pid runs the script)."""
    lines = []
    for uid in _tagged_dirs(root, prefix):
        job = root / ".mainboard" / "jobs" / uid
        pid = (job / "pid").read_text().strip() if (job / "pid").exists() else "-"
        ps = subprocess.run(["ps", "-ww", "-p", pid, "-o", "args="], capture_output=True,
                            text=True).stdout.strip() if pid != "-" else ""
        marks = [m for m in ("exit_code", "cancelled", "timeout") if (job / m).exists()]
        lines.append(f"{uid}: pid {pid} runs {ps!r} {marks}")
    return "\n".join(["", "job directories:", *lines])


def test_a_killed_controller_adopts_its_allocations_and_submits_nothing_twice(
        tmp_path: Path, slurm_cluster: SlurmCluster, sshd_server: SshServer,  # noqa: F811
        provisioned_root: Path) -> None:  # noqa: F811
    ws = workspace(
        tmp_path / "ws",
        table("hosts.cluster", kind="slurm", partition="debug", root=str(provisioned_root),
              python=HOST_PYTHON, env={"SLURM_CONF": str(slurm_cluster.conf)}),
        table("hosts.pbs", kind="pbs", root=str(provisioned_root), python=HOST_PYTHON,
              env={"SLURM_CONF": str(slurm_cluster.conf)}),
        ssh_host("lo", sshd_server, provisioned_root),
        table("fleet.pools.hpc", host="cluster", queues=["t19r.hpc"], jobs=1),
        table("fleet.pools.pbs", host="pbs", queues=["t19r.pbs"], jobs=1),
        table("fleet.pools.lo", host="lo", queues=["t19r.lo"], jobs=1))
    env = {SCALE_TICK_ENV: "0.2"}
    try:
        up_ok(ws, "--no-flower", env=env)
        prefix = owner_prefix(ws / ".mainboard")
        before = {w.worker_id: w.job["job_id"] for w in read_fleet(ws / ".mainboard").live()}
        pools = {w.pool: w.job["job_id"] for w in read_fleet(ws / ".mainboard").live()}
        assert sorted(pools) == ["hpc", "lo", "pbs"]
        lost = kill_keeper_and_lose_starts(ws)
        assert sorted(lost) == sorted(before) and not read_fleet(ws / ".mainboard").live()
        orphan = subprocess.run(
            ["sbatch", "--parsable", f"--comment={prefix}feed00", "--wrap", "sleep 300"],
            env=slurm_cluster.env, capture_output=True, text=True, check=True).stdout.strip()
        (tmp_path / "orphan.sh").write_text("#!/bin/sh\nsleep 300\n")
        pbs_orphan = subprocess.run(
            ["qsub", "-N", f"{prefix}feed01", "-l", "walltime=00:05:00", "-o",
             str(tmp_path / "orphan.out"), "-e", str(tmp_path / "orphan.err"),
             str(tmp_path / "orphan.sh")],
            env=slurm_cluster.env, capture_output=True, text=True, check=True).stdout.strip()

        done = cli(ws, "fleet", "status", "--json", env=env)  # no keeper: it reconciles
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        assert {r["worker_id"]: r["job_id"] for r in rows} == before, \
            done.stderr + _job_dirs_seen(provisioned_root, prefix)
        for worker_id in before:
            assert f"fleet: adopted worker {worker_id}" in done.stderr, done.stderr
        assert f"cleaned cluster: job {orphan} (no receipt knows it)" in done.stderr
        assert f"cleaned pbs: job {pbs_orphan} (no receipt knows it)" in done.stderr
        adopt = [e for e in read_fleet(ws / ".mainboard").scale if e.action == "adopt"]
        assert sorted(i for e in adopt for i in e.worker_ids) == sorted(before)

        wait_keeper_looks(ws, 10)  # nothing submitted over 10 looks of the restarted keeper
        state = read_fleet(ws / ".mainboard")
        assert {w.worker_id for w in state.live()} == set(before)
        assert not [e for e in state.scale if e.action == "submit"]
        jobs = wait_until(lambda: (j := _slurm_jobs(slurm_cluster, prefix))
                          and j[orphan] == "CANCELLED" and j, 30, "the orphan cancelled")
        assert _named_jobs(slurm_cluster, prefix).get(pbs_orphan) == "CANCELLED"
        assert sorted(jobs) == sorted([pools["hpc"], orphan])  # one sbatch for the pool, ever
        assert sorted(_named_jobs(slurm_cluster, prefix)) == sorted([pools["pbs"], pbs_orphan])
        assert len(_tagged_dirs(provisioned_root, prefix)) == 3  # lo's, hpc's and pbs's script
    finally:
        down = tear_down(ws, "--timeout", "20")
    assert down.returncode == 0, down.stderr
