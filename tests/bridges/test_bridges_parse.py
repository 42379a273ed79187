"""String tier: job ids, state tables and status parsing on recorded scheduler output.

``tests/fixtures/slurm/*`` and the ``*torque_wrapper*`` files are real recordings from
the test SLURM 22.05 on this machine. ``tests/fixtures/pbs/*openpbs*`` and
``qstat_json_*`` are a SIMULATION: hand-written in the OpenPBS 2022.1 output format (no
OpenPBS server can run here); see tests/fixtures/pbs/README.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mainboard.bridges import bridge_for
from mainboard.bridges.base import DirFacts, merge
from mainboard.bridges.jobstate import JobState, JobStatus, is_final, translate
from mainboard.bridges.pbs import PBS_STATES, PbsBridge, exit_status, parse_qstat_text
from mainboard.bridges.slurm import (
    SLURM_STATES,
    SlurmBridge,
    exit_pair,
    parse_sacct,
    parse_squeue,
    wait_status,
)
from mainboard.config import PbsHost, SlurmHost
from mainboard.errors import UserError
from tests.support.bridge_helpers import NoTraffic

FIXTURES = Path(__file__).parents[1] / "fixtures"


def slurm() -> SlurmBridge:
    b = bridge_for("hpc", SlurmHost(), NoTraffic(), root="/srv/mb")
    assert isinstance(b, SlurmBridge)
    return b


def pbs() -> PbsBridge:
    b = bridge_for("pbs", PbsHost(), NoTraffic(), root="/srv/mb")
    assert isinstance(b, PbsBridge)
    return b


@pytest.mark.parametrize(("stdout", "job_id"), [
    ("1234\n", "1234"),
    ("1234;cluster-a\n", "1234"),
    ("Welcome to the login node!\nquota: 80% used\n1234\n", "1234"),
])
def test_sbatch_parsable_output(stdout: str, job_id: str) -> None:
    assert slurm().parse_job_id(stdout) == job_id


@pytest.mark.parametrize(("stdout", "job_id"), [
    ((FIXTURES / "pbs" / "qsub_openpbs.txt").read_text(), "1234.pbs01"),
    ((FIXTURES / "pbs" / "qsub_torque_wrapper.txt").read_text(), "21"),
    ("1235[].pbs01\n", "1235[].pbs01"),
    ("motd line\n987.server.example.org\n", "987.server.example.org"),
])
def test_qsub_output(stdout: str, job_id: str) -> None:
    assert pbs().parse_job_id(stdout) == job_id


def test_submit_output_without_an_id_is_one_clear_error() -> None:
    with pytest.raises(UserError, match=r"no job id \(a SLURM job id.*'Submitted batch job'"):
        slurm().parse_job_id("Submitted batch job\n")
    with pytest.raises(UserError, match="no job id .*qsub: Unknown queue"):
        pbs().parse_job_id("qsub: Unknown queue\n")


@pytest.mark.parametrize("bad", ["1; rm -rf ~", "1234;cluster", "-1", "$(id)", ""])
def test_ids_that_are_not_the_schedulers_are_refused_before_any_command(bad: str) -> None:
    for bridge in (slurm(), pbs()):
        with pytest.raises(UserError, match="is not a"):
            bridge.status([bad])


def test_slurm_state_table() -> None:
    expected = {
        JobState.PENDING: ["PENDING", "CONFIGURING", "REQUEUED", "SUSPENDED"],
        JobState.RUNNING: ["RUNNING", "COMPLETING"],
        JobState.COMPLETED: ["COMPLETED"],
        JobState.FAILED: ["FAILED", "OUT_OF_MEMORY", "BOOT_FAIL"],
        JobState.CANCELLED: ["CANCELLED"],
        JobState.TIMEOUT: ["TIMEOUT", "DEADLINE"],
        JobState.PREEMPTED: ["PREEMPTED", "NODE_FAIL"],
    }
    for state, natives in expected.items():
        for native in natives:
            assert translate(native, SLURM_STATES) is state, native
    assert translate("running", SLURM_STATES) is JobState.RUNNING  # case-insensitive
    assert translate("SOMETHING_NEW", SLURM_STATES) is JobState.UNKNOWN


def test_pbs_state_table() -> None:
    assert {letter: PBS_STATES[letter] for letter in "QHWRESF"} == {
        "Q": JobState.PENDING, "H": JobState.PENDING, "W": JobState.PENDING,
        "R": JobState.RUNNING, "E": JobState.RUNNING, "S": JobState.PENDING,
        "F": JobState.COMPLETED}
    assert translate("Z", PBS_STATES) is JobState.UNKNOWN


def test_final_states_and_requeue_for_workers() -> None:
    final = {s for s in JobState if s.final}
    assert final == {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED,
                     JobState.TIMEOUT, JobState.PREEMPTED}
    assert is_final(JobState.PREEMPTED) and not is_final(JobState.PREEMPTED, requeue=True)
    node_fail = translate("NODE_FAIL", SLURM_STATES)
    assert not is_final(node_fail, requeue=True)
    assert is_final(JobState.FAILED, requeue=True) and not is_final(JobState.UNKNOWN)


def test_wait_status_and_exit_pairs() -> None:
    assert wait_status("768") == (3, "") and wait_status("0") == (0, "")
    assert wait_status("36608") == (143, "")
    assert wait_status("15") == (None, "killed by signal 15")
    assert exit_pair("3:0") == (3, "") and exit_pair("0:15") == (None, "killed by signal 15")


def test_squeue_recording() -> None:
    """Real ``squeue -h -t all -O ...`` output from the test SLURM (see fixtures/slurm)."""
    text = (FIXTURES / "slurm" / "squeue_all.txt").read_text()
    found = parse_squeue(text, ["8", "9", "10", "18", "19", "20", "23"])
    assert found["8"] == JobStatus(JobState.COMPLETED, "COMPLETED", 0, "")
    assert found["9"] == JobStatus(JobState.FAILED, "FAILED", 3, "NonZeroExitCode")
    assert found["10"] == JobStatus(JobState.CANCELLED, "CANCELLED", 143, "")
    assert found["19"] == JobStatus(JobState.PREEMPTED, "NODE_FAIL", None, "killed by signal 15")
    assert found["20"] == JobStatus(JobState.PENDING, "PENDING", None, "PartitionTimeLimit")
    assert found["18"].state is JobState.TIMEOUT and found["18"].native == "TIMEOUT"
    assert found["23"] == JobStatus(JobState.RUNNING, "RUNNING", None, "")
    assert parse_squeue(text, ["99"]) == {}


def test_sacct_jobcomp_recording() -> None:
    """Real ``sacct -c`` output: names with spaces break its parser (blank state: skipped)."""
    text = (FIXTURES / "slurm" / "sacct_jobcomp.txt").read_text()
    found = parse_sacct(text, ["1", "2", "9", "10", "19"])
    assert found["1"] == JobStatus(JobState.FAILED, "FAILED", 3, "")
    assert found["9"].exit_code == 3 and found["10"].state is JobState.CANCELLED
    assert found["19"].state is JobState.PREEMPTED
    assert "2" not in found  # left to the caller as UNKNOWN


def load(name: str) -> dict[str, dict[str, object]]:
    return json.loads((FIXTURES / "pbs" / name).read_text())["Jobs"]


def test_openpbs_json_queued_and_running() -> None:
    """SIMULATION of OpenPBS ``qstat -x -f -F json`` (hand-written in its format)."""
    queued = pbs()._statuses(load("qstat_json_queued.json"), ["1234.pbs01"])["1234.pbs01"]
    assert (queued.state, queued.native) == (JobState.PENDING, "Q")
    assert queued.reason.startswith("Not Running: Insufficient amount of resource: ncpus")
    running = pbs()._statuses(load("qstat_json_running.json"), ["1239"])  # short id asked
    assert running == {"1239": JobStatus(JobState.RUNNING, "R", None,
                                         "Job run at Mon Jun 03 at 11:20 on "
                                         "(node07:ncpus=4:mem=8388608kb)")}


def test_openpbs_json_finished_jobs_by_exit_status() -> None:
    """SIMULATION: finished history jobs; Exit_status decides the outcome."""
    ids = ["1240.pbs01", "1241.pbs01", "1242.pbs01", "1243.pbs01", "1244.pbs01"]
    found = pbs()._statuses(load("qstat_json_finished.json"), ids)
    assert [(found[i].state, found[i].exit_code) for i in ids] == [
        (JobState.COMPLETED, 0), (JobState.FAILED, 3), (JobState.TIMEOUT, None),
        (JobState.FAILED, None), (JobState.FAILED, None)]
    assert found["1242.pbs01"].reason == "killed at walltime (JOB_EXEC_KILL_WALLTIME)"
    assert found["1243.pbs01"].reason == "killed by signal 15"
    assert "JOB_EXEC_KILL_MEM" in found["1244.pbs01"].reason
    assert exit_status(-3) == (JobState.FAILED, None, "PBS could not run the job (Exit_status -3)")


def test_openpbs_text_with_wrapped_values() -> None:
    """SIMULATION of OpenPBS ``qstat -x -f`` text: TAB-continued lines are joined."""
    jobs = parse_qstat_text((FIXTURES / "pbs" / "qstat_xf_openpbs.txt").read_text())
    assert list(jobs) == ["1239.pbs01", "1241.pbs01"]
    running, done = jobs["1239.pbs01"], jobs["1241.pbs01"]
    assert running["Error_Path"] == ("login01:/home/alice/mainboard/.mainboard/jobs/"
                                     "20240603-112001-worker-4d5e6f/stderr")
    assert "PBS_O_PATH=/usr/local/bin:/usr/bin:/bin:/opt/pbs/bin," in running["Variable_List"]
    assert running["Resource_List.select"] == "1:ncpus=4:mem=8gb"
    assert done["comment"].endswith("and finished") and done["Exit_status"] == "3"
    found = pbs()._statuses(jobs, ["1239.pbs01", "1241"])
    assert found["1239.pbs01"].state is JobState.RUNNING
    assert (found["1241"].state, found["1241"].exit_code) == (JobState.FAILED, 3)


def test_torque_wrapper_recording_has_no_exit_status() -> None:
    """Real recording: the wrapper says C for a job that exited 3; only the job dir knows."""
    jobs = parse_qstat_text((FIXTURES / "pbs" / "qstat_f_torque_wrapper.txt").read_text())
    assert jobs["21"]["job_state"] == "R" and jobs["22"]["Job_Name"] == "rec-done"
    found = pbs()._statuses(jobs, ["21", "22"])
    assert found["21"].state is JobState.RUNNING
    assert found["22"].state is JobState.COMPLETED and found["22"].exit_code is None
    assert "no exit status" in found["22"].reason
    corrected = merge(found["22"], DirFacts(present=True, exit_code=3))
    assert (corrected.state, corrected.exit_code) == (JobState.FAILED, 3)


@pytest.mark.parametrize(("native", "facts", "expected"), [
    (JobStatus(JobState.COMPLETED, "C"), DirFacts(True, exit_code=0), (JobState.COMPLETED, 0)),
    (JobStatus(JobState.COMPLETED, "C"), DirFacts(True, exit_code=4), (JobState.FAILED, 4)),
    (JobStatus(JobState.FAILED, "C"), DirFacts(True, exit_code=143, cancelled=True),
     (JobState.CANCELLED, 143)),
    (JobStatus(JobState.TIMEOUT, "TIMEOUT"), DirFacts(True, exit_code=143), (JobState.TIMEOUT, 143)),
    (JobStatus(JobState.PREEMPTED, "NODE_FAIL"), DirFacts(True), (JobState.PREEMPTED, None)),
    (JobStatus(JobState.CANCELLED, "CANCELLED"), DirFacts(True, exit_code=143),
     (JobState.CANCELLED, 143)),  # scancel by someone else: no marker, still cancelled
    (JobStatus(JobState.UNKNOWN), DirFacts(True, exit_code=0), (JobState.COMPLETED, 0)),
    (JobStatus(JobState.UNKNOWN), DirFacts(True), (JobState.UNKNOWN, None)),
    (JobStatus(JobState.FAILED, "FAILED", 2), DirFacts(False), (JobState.FAILED, 2)),
])
def test_job_directory_corrects_the_schedulers_final_word(
        native: JobStatus, facts: DirFacts, expected: tuple[JobState, int | None]) -> None:
    merged = merge(native, facts)
    assert (merged.state, merged.exit_code) == expected


def test_status_describe_for_listings() -> None:
    assert JobStatus(JobState.FAILED, "FAILED", 3).describe() == "failed (exit code 3; FAILED)"
    assert JobStatus(JobState.RUNNING).describe() == "running"


def test_the_slurm_listing_gives_state_end_and_tag_of_every_job() -> None:
    """``squeue --me -t all -O JobID:|,State:|,Reason:|,exit_code:|,EndTime:|,Comment:|``
    as captured from SLURM 22.05: a failed job, a held one with a fleet tag."""
    text = ("3|FAILED|NonZeroExitCode|768|2026-12-06T02:34:05|(null)|\n"
            "2|PENDING|JobHeldUser|0|N/A|mbf-ab12-w1|with|bars|\n")
    rows = SlurmBridge.parse_listing(text)
    assert rows["2"]["tag"] == "mbf-ab12-w1|with|bars" and rows["3"]["tag"] == ""
    bridge = slurm()
    assert bridge.row_status(rows["3"]) == JobStatus(JobState.FAILED, "FAILED", 3,
                                                     "NonZeroExitCode")
    assert bridge.row_status(rows["2"]) == JobStatus(JobState.PENDING, "PENDING", None,
                                                     "JobHeldUser")
    assert SlurmBridge.end_time(rows["2"]["end"]) is None
    assert SlurmBridge.end_time(rows["3"]["end"]) is not None


def test_the_pbs_listing_finds_a_job_asked_without_its_server() -> None:
    text = ("Job Id: 1234.pbs01\n    Job_Name = mbf-ab12-w2\n    job_state = R\n\n"
            "Job Id: 1235.pbs01\n    Job_Name = other\n    job_state = F\n"
            "    Exit_status = 3\n")
    rows = PbsBridge.parse_listing(text)
    bridge = pbs()
    assert PbsBridge.row_of(rows, "1234") is rows["1234.pbs01"]
    assert PbsBridge.row_of(rows, "99") is None
    assert bridge.row_status(rows["1234.pbs01"]).state is JobState.RUNNING
    assert bridge.row_status(rows["1235.pbs01"]) == JobStatus(JobState.FAILED, "F", 3, "")
    assert rows["1234.pbs01"]["tag"] == "mbf-ab12-w2"
