"""Faults found by injection into the fleet (issue 19): the worker's own retire clock
against its allocation's end (SLURM's signal a backstop), a dead ssh host leaving the fleet."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from mainboard.bridges.jobstate import JobState, JobStatus
from mainboard.bridges.slurm import parse_end, signal_backstop
from mainboard.bridges.tunnel import TunnelStatus
from mainboard.config import SlurmHost
from mainboard.fleet.keeper import LOST_AFTER_ENV, status_row
from mainboard.fleet.launch import UpOptions, worker_spec
from mainboard.fleet.records import read_fleet
from mainboard.fleet.status import STALE_AFTER_S, _state
from mainboard.tasks.fleet import RETIRE_ENV, retire_delay
from tests.support.fleet_helpers import (
    cli,
    processes_matching,
    provisioned_root,  # noqa: F401 - session fixture
    ssh_host,
    status,
    stop_broker,
    up_ok,
    wait_until,
    workspace,
)
from tests.support.services import SshServer, start_sshd


def test_the_allocation_end_is_read_as_squeue_prints_it() -> None:
    end = parse_end("2026-12-03T10:40:12\n")
    assert end == time.mktime((2026, 12, 3, 10, 40, 12, 0, 0, -1))
    assert parse_end("N/A") is None and parse_end("Unknown") is None and parse_end("") is None


def test_the_worker_retires_exactly_retire_before_the_end_by_its_own_clock() -> None:
    assert retire_delay(end=1000.0, retire_before=60, now=900.0) == 40.0
    assert retire_delay(end=1000.0, retire_before=60, now=950.0) == 0.0


def test_slurms_early_signal_is_only_a_backstop_after_the_workers_own_retirement() -> None:
    for before in (2, 30, 60, 119, 120, 300, 3600):
        back = signal_backstop(before)
        assert 1 <= back < before
        if before >= 120:
            assert back + 60 <= before  # fires at most 60 s early: still after the worker's
    spec = worker_spec("hpc", SlurmHost(kind="slurm"), UpOptions.parse(walltime="10m"),
                       worker_id="w1")
    assert spec.retire_before == 240 and spec.env[RETIRE_ENV] == "300"


# ----- live: a dead ssh host leaves the fleet ------------------------------------------------

@pytest.mark.live
@pytest.mark.timeout(240)
def test_a_dead_ssh_host_is_marked_lost_not_dialled_and_leaves_with_force(
        tmp_path: Path, provisioned_root: Path) -> None:  # noqa: F811
    """Its sshd gone: the keeper gives up after its retry budget (2 s here) and records the
    worker lost; `fleet status --json` answers at once showing it lost; `fleet down` says
    to use --force; `fleet down --force` forgets it (exit 0, one line saying what may still
    run there and how to end it)."""
    server = start_sshd(tmp_path / "sshd")
    ws = workspace(tmp_path / "ws", ssh_host("doomed", server, provisioned_root))
    env = {LOST_AFTER_ENV: "2"}
    node, secret = "", None
    try:
        up_ok(ws, "--on", "doomed", "--no-flower", env=env)
        worker = read_fleet(ws / ".mainboard").live()[0]
        node, secret = worker.node, Path(worker.secret_path)
        assert worker.broker_via == "tunnel"
        again = cli(ws, "fleet", "up", "--on", "doomed", "--no-flower", "--json", env=env)
        assert again.returncode == 0 and json.loads(again.stdout)["started"] == [], again.stderr
        assert "doomed: 1 allocation(s) already live" in again.stderr  # a target, not a pile
        _kill_host(server)  # the host dies: no sshd, every session of it gone
        lost = wait_until(lambda: read_fleet(ws / ".mainboard").lost, 60, "the worker lost")
        assert worker.worker_id in lost and "unreachable" in lost[worker.worker_id].reason
        log = ws / ".mainboard" / "fleet" / "keeper.log"
        dialled = log.read_text().count("reconnect attempt")
        # with nothing left to hold the keeper exits (LINGER_S later, longer than the tunnel's
        # back-off): had it kept dialling, its log would say so before that line
        wait_until(lambda: "nothing left to keep; exiting" in log.read_text(), 60,
                   "the keeper exiting with nothing left to keep")
        assert log.read_text().count("reconnect attempt") == dialled  # no longer dialled
        rows = status(ws)
        assert [r["state"] for r in rows] == ["lost"], rows
        refused = cli(ws, "fleet", "down")
        assert refused.returncode == 1 and "--force" in refused.stderr, refused.stderr
        forced = cli(ws, "fleet", "down", "--force")
        assert forced.returncode == 0, forced.stderr
        warning = [line for line in forced.stderr.splitlines() if line.strip()]
        assert len(warning) == 1 and node in warning[0] and "pkill -f" in warning[0], warning
        assert forced.stdout.strip() == f"doomed: worker {node} forgotten"
        assert status(ws) == []
    finally:
        for line in processes_matching(node) if node else []:  # our worker, by its pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        if secret is not None:  # what the operator cleans on a forgotten host; the root is
            secret.unlink(missing_ok=True)  # shared with tests/fleet/test_fleet_live.py
        server.stop()
        stop_broker(ws)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.name.isdigit() and \
                    int((entry / "stat").read_text().rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _kill_host(server: SshServer) -> None:
    """Stop the test sshd and SIGKILL its session processes (our own children, by pid)."""
    pid = server.proc.pid
    sessions = _children(pid)
    server.stop()
    for child in sessions:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_a_healthy_tunnel_carries_no_stale_error_in_tunnels_json() -> None:
    back = TunnelStatus("w1", 4100, "127.0.0.1:6379", True, 1, 2, 0, "connection refused")
    assert status_row(back, "cannot reach h")["error"] is None
    down = TunnelStatus("w1", 4100, "127.0.0.1:6379", False, 1, 2, 0, "connection refused")
    assert status_row(down, None)["error"] == "connection refused"
    assert status_row(None, "cannot reach h") == {"healthy": False, "since": None,
                                                  "remote_port": None, "reconnects": 0,
                                                  "error": "cannot reach h"}


def test_a_preempted_or_cancelled_worker_is_shown_lost_not_starting() -> None:
    """squeue shows a scancelled/preempted job COMPLETING for a while (RUNNING to us): with
    its worker no longer answering that is lost; so is a job that ended other than by
    retiring, and a worker whose heartbeat stopped; starting is a job that never beat."""
    now = time.time()
    completing = JobStatus(JobState.RUNNING, "COMPLETING")
    assert _state(completing, online=False, beat=now) == "lost"
    for final in (JobState.CANCELLED, JobState.PREEMPTED, JobState.TIMEOUT, JobState.FAILED):
        assert _state(JobStatus(final, final.value.upper()), online=False, beat=now) == "lost"
    running = JobStatus(JobState.RUNNING, "RUNNING")
    assert _state(running, online=False, beat=now - STALE_AFTER_S - 1) == "lost"
    assert _state(running, online=False, beat=None) == "starting"
    assert _state(running, online=True, beat=now) == "online"
    assert _state(JobStatus(JobState.COMPLETED, "COMPLETED"), online=False, beat=now) \
        == "completed"  # retired on schedule
    assert STALE_AFTER_S <= 30  # lost within 30 s of the last heartbeat


def test_a_lost_worker_stays_lost_once_the_keeper_recorded_it_gone(tmp_path: Path) -> None:
    """The keeper records a lost worker stopped (and replaces it) within a tick: `fleet
    status --all` must go on saying lost, not stopped like a worker `fleet down` drained
    (found by the kill-every-30-s scenario: the lost state lasted one keeper tick)."""
    from mainboard.fleet.records import fleet_receipts
    from mainboard.fleet.status import _stopped_row
    from mainboard.receipts import WorkerStarted, WorkerStopped

    worker = WorkerStarted(worker_id="w1", host="hpc", kind="slurm", node="slurm-hpc-7",
                           queues=["q"], concurrency=1, root="/r", job={
                               "job_id": "7", "uid": "u7", "host": "hpc", "kind": "slurm",
                               "name": "w", "job_dir": "/r/j", "submitted_at": 0.0,
                               "spec": {"command": "true"}},
                           python="python3", broker_via="direct", secret_path="/r/s")
    receipts = fleet_receipts(tmp_path)
    receipts.append(WorkerStopped(worker_id="w1", host="hpc", state="failed",
                                  reason="its job ended: failed", lost=True))
    stop = read_fleet(tmp_path).stopped["w1"]
    row = _stopped_row(worker, stop)
    assert (row.state, row.job_state, row.stopped) == ("lost", "failed", True)
    drained = WorkerStopped(worker_id="w1", host="hpc", state="cancelled", reason="fleet down")
    assert _stopped_row(worker, drained).state == "stopped"
    old = WorkerStopped.model_validate({"worker_id": "w1", "host": "hpc", "reason": "x"})
    assert old.lost is False  # receipts written before the field read as before
