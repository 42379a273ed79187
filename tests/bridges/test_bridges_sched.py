"""Live tier, schedulers: a real single-node SLURM, and the PBS-style wrappers over it.

SLURM: sbatch/squeue/sacct -c/scancel on the session's cluster. PBS: the
slurm-wlm-torque ``qsub``/``qstat``/``qdel`` wrappers (``qstat -F json`` is refused
there, so the bridge falls back to ``qstat -f`` text; ``$PBS_JOBID`` is empty and the
script uses ``$SLURM_JOB_ID``). OpenPBS's own output is covered by the SIMULATED
fixtures in tests/bridges/test_bridges_parse.py. Walltime kills are not waited for here (SLURM
counts in minutes); TIMEOUT translation is tested on the real recording there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mainboard.bridges import bridge_for
from mainboard.bridges.base import Bridge
from mainboard.bridges.jobstate import JobState
from mainboard.bridges.transport import LocalTransport
from mainboard.config import PbsHost, SlurmHost
from mainboard.errors import CommandFailed
from tests.support.bridge_helpers import wait_for
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.services import SlurmCluster

pytestmark = pytest.mark.live
HOSTILE = "a'; echo pwned $(touch {mark}) `touch {mark}` \"q\" x"


def slurm_bridge(cluster: SlurmCluster, root: Path) -> Bridge:
    host = SlurmHost(env={"SLURM_CONF": str(cluster.conf)}, partition=cluster.partition)
    return bridge_for("hpc", host, LocalTransport("hpc"), root=str(root))


def pbs_bridge(cluster: SlurmCluster, root: Path) -> Bridge:
    host = PbsHost(env={"SLURM_CONF": str(cluster.conf)}, queue=cluster.partition)
    return bridge_for("pbs", host, LocalTransport("pbs"), root=str(root))


def test_slurm_submit_run_complete_fail_cancel_and_logs(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    mark = tmp_path / "pwned"
    hostile = HOSTILE.format(mark=mark)
    bridge = slurm_bridge(slurm_cluster, tmp_path / "50% s'root $(x)")
    ok = bridge.submit(command='echo "$MAINBOARD_JOB_NAME|$MAINBOARD_JOB_ID|$MB_X"; seq 3',
                       name=hostile, env={"MB_X": hostile}, walltime="5m", cpus=1, mem_gb=0.25)
    bad = bridge.submit(command="echo nope >&2; exit 3", name="bad")
    long = bridge.submit(command="sleep 300", name="long")
    assert all(r.job_id.isdigit() and r.kind == "slurm" for r in (ok, bad, long))
    assert wait_for(bridge, [long], until="running")[long.job_id].native == "RUNNING"
    bridge.cancel([long])
    found = wait_for(bridge, [ok, bad, long])
    assert (found[ok.job_id].state, found[ok.job_id].exit_code) == (JobState.COMPLETED, 0)
    assert (found[bad.job_id].state, found[bad.job_id].exit_code) == (JobState.FAILED, 3)
    assert found[bad.job_id].native == "FAILED"
    assert found[long.job_id].state is JobState.CANCELLED
    assert bridge.status([ok.job_id, bad.job_id, long.job_id]) == {  # squeue alone agrees
        ok.job_id: JobState.COMPLETED, bad.job_id: JobState.FAILED,
        long.job_id: JobState.CANCELLED}
    assert bridge.logs(ok) == f"{hostile}|{ok.job_id}|{hostile}\n1\n2\n3\n"
    assert bridge.logs(ok, tail=1) == "3\n" and bridge.logs(bad, stream="stderr") == "nope\n"
    assert not mark.exists()
    bridge.cancel([ok.job_id])  # already over: no error


def job_fields(bridge: Bridge, job_id: str) -> dict[str, str]:
    """``scontrol -o show job`` as a dict: what SLURM actually granted."""
    text = bridge.run(["scontrol", "-o", "show", "job", job_id], check=True).stdout
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def test_headers_are_what_the_scheduler_grants(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    """Both header dialects, read by the real sbatch (it parses #PBS lines for the wrappers)."""
    slurm = slurm_bridge(slurm_cluster, tmp_path / "s")
    pbs = pbs_bridge(slurm_cluster, tmp_path / "p")
    asked = {"walltime": "7:30", "cpus": 2, "mem_gb": 0.5, "queue": "short"}
    jobs = [(b, b.submit(command="sleep 2", name="hdr", **asked)) for b in (slurm, pbs)]
    for bridge, record in jobs:
        fields = job_fields(bridge, record.job_id)
        assert (fields["JobName"], fields["Partition"], fields["TimeLimit"]) == (
            "hdr", "short", "00:08:00")  # SLURM rounds up to whole minutes
        assert (fields["MinCPUsNode"], fields["MinMemoryNode"]) == ("2", "512M")
    assert job_fields(slurm, jobs[0][1].job_id)["StdOut"] == jobs[0][1].paths.stdout
    slurm.cancel([jobs[0][1]])
    pbs.cancel([jobs[1][1]])


def test_slurm_ids_it_no_longer_knows_fall_back_to_the_jobcomp_file(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    bridge = slurm_bridge(slurm_cluster, tmp_path)
    found = bridge.poll(["999999"])["999999"]
    assert found.state is JobState.UNKNOWN
    assert bridge._sacct_flags == ["-c"]  # type: ignore[attr-defined]  # accounting is off here


def test_slurm_refusal_carries_the_schedulers_words(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    bridge = slurm_bridge(slurm_cluster, tmp_path)
    with pytest.raises(CommandFailed) as caught:
        bridge.submit(command="true", queue="nosuch")  # no [queues] declared: sbatch decides
    assert "sbatch" in caught.value.command and caught.value.returncode != 0
    assert "invalid partition" in caught.value.stderr.lower()


def test_pbs_wrappers_submit_status_complete_fail_cancel_and_logs(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    bridge = pbs_bridge(slurm_cluster, tmp_path / "pbs-root")
    ok = bridge.submit(command='echo "id=$MAINBOARD_JOB_ID"; seq 3', name="a'; b", walltime=300,
                       cpus=1, mem_gb=0.25)
    bad = bridge.submit(command="exit 3", name="bad")
    long = bridge.submit(command="sleep 300", name="long")
    running = wait_for(bridge, [long], until="running")[long.job_id]
    assert running.native == "R"
    bridge.cancel([long])
    found = wait_for(bridge, [ok, bad, long])
    assert (found[ok.job_id].state, found[ok.job_id].exit_code) == (JobState.COMPLETED, 0)
    assert (found[bad.job_id].state, found[bad.job_id].exit_code) == (JobState.FAILED, 3)
    assert found[long.job_id].state is JobState.CANCELLED
    assert {found[i].native for i in found} == {"C"}  # the wrapper only ever says C
    assert bridge.logs(ok) == f"id={ok.job_id}\n1\n2\n3\n"  # $PBS_JOBID empty: SLURM's id
    assert bridge.logs(ok, tail=2) == "2\n3\n"
    assert bridge._json is False  # type: ignore[attr-defined]  # -F json refused: text parsed
    bridge.cancel([bad])  # qdel fails on a finished job; the bridge checks and accepts that
    assert bridge.poll([bad])[bad.job_id].exit_code == 3
