"""`submit` prints the scheduler's id on a real SLURM (and its PBS wrappers); every `jobs`
verb takes either id.

The id printed is checked against `squeue`'s (`qstat`'s) own listing; `jobs show|logs|cancel` are
run as fresh processes with it. One scheduler id on two hosts (two clusters number
their jobs alike) is refused naming both jobs; an id nobody has is one line, exit 2.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mainboard.board import Board
from mainboard.bridges.jobstate import JobState
from mainboard.errors import AmbiguousJob
from mainboard.jobs.job import Job
from mainboard.jobs.store import JobStore
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.jobs_workspace import make_workspace, wait_running, wait_until
from tests.support.services import SlurmCluster
from tests.support.workspace import run_cli

pytestmark = pytest.mark.live


@pytest.fixture
def board(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[Board]:  # noqa: F811
    with Board(make_workspace(tmp_path, slurm=slurm_cluster)) as found:
        yield found


LISTS = {"hpc": ["squeue", "-h", "-o", "%i"], "pbs": ["qstat"]}  # what a user pastes ids into


def _listed_ids(cluster: SlurmCluster, host: str) -> set[str]:
    """The ids the scheduler's own listing shows (the PBS host: the torque wrappers' qstat)."""
    listed = subprocess.run(LISTS[host], env=cluster.env, capture_output=True, text=True,
                            check=True, timeout=30)
    return {word.split(".")[0] for word in listed.stdout.split()}


@pytest.mark.parametrize("host", ["hpc", "pbs"])
def test_submit_prints_the_id_the_scheduler_lists_and_jobs_verbs_take_it(
        board: Board, slurm_cluster: SlurmCluster, host: str) -> None:  # noqa: F811
    config = board.config.path
    assert config is not None
    done = run_cli(config, "submit", "--on", host, "--name", "ids", "--",
                   "echo started; sleep 120")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.strip()
    assert printed in _listed_ids(slurm_cluster, host), (printed, done.stdout)
    (view,) = JobStore(board.config.state_dir).by_scheduler_id(printed)
    assert view.submitted.job_id == printed and view.id != printed
    job = Job(board, printed)  # the API resolves it the same way
    assert job.id == view.id
    wait_running(job)
    shown = run_cli(config, "jobs", "show", printed, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert (data["id"], data["job_id"], data["host"], data["state"]) == (
        view.id, printed, host, "running")
    wait_until(lambda: job.logs() == "started\n", f"job {printed} wrote its first line", 60)
    logs = run_cli(config, "jobs", "logs", printed)
    assert (logs.returncode, logs.stdout) == (0, "started\n"), logs.stderr
    human = run_cli(config, "jobs", "show", printed)
    assert f"job_id:    {printed}" in human.stdout and f"id:        {view.id}" in human.stdout
    cancelled = run_cli(config, "jobs", "cancel", printed, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    answer = json.loads(cancelled.stdout)
    assert (answer["id"], answer["host"], answer["job_id"]) == (view.id, host, printed)
    # scancel returns before slurmctld has ended the job: wait for its state, not a clock.
    wait_until(lambda: job.status() is JobState.CANCELLED, f"job {printed} cancelled", 60)
    # --json carries both ids; a host without a scheduler prints mainboard's id as before.
    both = json.loads(run_cli(config, "submit", "--on", host, "--json", "--", "true").stdout)
    assert both["job_id"].isdigit() and both["id"] != both["job_id"]
    local = run_cli(config, "submit", "--on", "scratch", "--", "true").stdout.strip()
    assert local == Job(board, local).id and not local.isdigit()


def test_unknown_and_ambiguous_ids_are_one_line_exit_2(board: Board) -> None:
    config = board.config.path
    assert config is not None
    job = board.on("hpc").submit("true", name="twin")
    scheduler_id = job.view().submitted.job_id
    unknown = run_cli(config, "jobs", "show", "987654321")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.count("\n") == 1 and "no job '987654321'" in unknown.stderr
    # A second cluster that numbered a job alike: its receipt names another host.
    store = JobStore(board.config.state_dir)
    first = job.view().submitted
    twin = first.model_copy(update={"id": first.id + "x", "host": "pbs", "kind": "pbs"})
    store.submitted(twin)
    for verb in (["show"], ["logs"], ["pull"], ["cancel"]):
        refused = run_cli(config, "jobs", *verb, scheduler_id)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert f"{first.id} on hpc" in refused.stderr and f"{twin.id} on pbs" in refused.stderr
    with pytest.raises(AmbiguousJob, match="give mainboard's id"):
        Job(board, scheduler_id)
    merged = run_cli(config, "trace", "merge", scheduler_id, "-o", str(config.parent / "t.json"))
    assert merged.returncode == 2 and "is the scheduler id of 2 jobs" in merged.stderr
    assert Job(board, first.id).id == first.id  # mainboard's id still names each one
