"""Live tier, no scheduler: detached jobs on this machine and on the loopback sshd.

Real processes only: the submitting Python process exits while its job runs on; the
ssh job is launched over paramiko, the connection pool is closed, and a fresh
connection later reads the pid and exit code the job left on the host.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mainboard.bridges import bridge_for
from mainboard.bridges.base import Bridge, JobRecord
from mainboard.bridges.jobstate import JobState
from mainboard.bridges.transport import LocalTransport
from mainboard.config import LocalHost, SshHost
from tests.support.bridge_helpers import wait_for
from tests.support.services import SshServer

pytestmark = pytest.mark.live
HOSTILE = "a'; echo pwned $(touch {mark}) `touch {mark}` \"q\" x"


@pytest.fixture
def local(tmp_path: Path) -> Bridge:
    """A local bridge whose root has spaces and quotes in it."""
    return bridge_for("local", LocalHost(), LocalTransport(), root=str(tmp_path / "lo cal'root"))


def running(pid_file: Path, script: str) -> bool:
    """The pid in ``pid_file`` is alive and still this job's script (not a zombie)."""
    done = subprocess.run(["ps", "-ww", "-p", pid_file.read_text().strip(), "-o", "args="],
                          capture_output=True, text=True)
    return script in done.stdout


SUBMITTER = """
import sys
from mainboard.bridges import bridge_for
from mainboard.bridges.transport import LocalTransport
from mainboard.config import LocalHost
bridge = bridge_for("local", LocalHost(), LocalTransport(), root=sys.argv[1])
record = bridge.submit(command="sleep 1.5; echo still here; exit 4", name="orphan")
print(record.model_dump_json())
"""


def test_local_job_outlives_the_process_that_submitted_it(local: Bridge) -> None:
    done = subprocess.run([sys.executable, "-c", SUBMITTER, local.root], capture_output=True,
                          text=True, check=True, timeout=30)  # the submitter has exited here
    record = JobRecord.model_validate_json(done.stdout)
    assert record.kind == "local" and record.job_id == record.uid
    paths = Path(record.job_dir)
    assert running(paths / "pid", str(paths / "job.sh"))  # its parent is gone, it is not
    status = wait_for(local, [record])[record.job_id]
    assert (status.state, status.exit_code) == (JobState.FAILED, 4)
    assert local.logs(record) == "still here\n"
    assert (paths / "exit_code").read_text() == "4\n"
    assert oct((paths).stat().st_mode & 0o777) == "0o700"  # env values may be secrets


def test_local_outcomes_logs_and_hostile_values(local: Bridge, tmp_path: Path) -> None:
    mark = tmp_path / "pwned"
    hostile = HOSTILE.format(mark=mark)
    ok = local.submit(command='printf "%s\\n" "$MAINBOARD_JOB_NAME" "$MB_X" 1 2 3 4 5; '
                              'echo warn >&2', name=hostile, env={"MB_X": hostile})
    bad = local.submit(command=["sh", "-c", "exit 3"], name="bad")
    found = wait_for(local, [ok, bad])
    assert (found[ok.job_id].state, found[ok.job_id].exit_code) == (JobState.COMPLETED, 0)
    assert (found[bad.job_id].state, found[bad.job_id].exit_code) == (JobState.FAILED, 3)
    assert local.logs(ok) == f"{hostile}\n{hostile}\n1\n2\n3\n4\n5\n"
    assert local.logs(ok, tail=2) == "4\n5\n"
    assert local.logs(ok, stream="stderr") == "warn\n"
    assert local.status([ok.job_id, bad.job_id]) == {ok.job_id: JobState.COMPLETED,
                                                     bad.job_id: JobState.FAILED}
    assert not mark.exists()
    local.cancel([ok, bad])  # already over: nothing to stop, no error, outcome unchanged
    assert local.poll([bad])[bad.job_id].exit_code == 3


@pytest.mark.parametrize(("shown", "alive"), [
    ("[bash]", True),  # mid-exec: no command line yet (nohup -> setsid -> bash)
    ("[bash] <defunct>", False),  # a zombie
    ("/usr/bin/python3 something else", False),  # the pid was reused
    ("/bin/bash {script}", True),
])
def test_a_job_process_between_two_execs_is_alive_and_a_zombie_is_not(
        local: Bridge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shown: str,
        alive: bool) -> None:
    """What ps shows for the recorded pid decides liveness. A simulation: ``ps`` on PATH
    prints the given line (the real window in which a process has no command line is too
    short to hit on purpose); the job directory is a real one, with a live pid recorded."""
    job = Path(local.root) / "probe-dir"
    job.mkdir(parents=True)
    (job / "pid").write_text(f"{os.getpid()}\n")
    (job / "started").write_text("1.5\n")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ps").write_text("#!/bin/sh\nprintf '%s\\n' " +
                             shlex.quote(shown.format(script=job / "job.sh")) + "\n")
    (fake / "ps").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    facts = local.read_facts([str(job)])[str(job)]
    assert (facts.alive, facts.exit_code, facts.pid) == (alive, None, os.getpid())


def test_job_dir_is_private_but_the_job_keeps_the_usual_umask(local: Bridge) -> None:
    umask = os.umask(0o022)
    try:
        record = local.submit(command="touch made-by-job", name="files")
        wait_for(local, [record])
    finally:
        os.umask(umask)
    assert Path(record.job_dir).stat().st_mode & 0o777 == 0o700
    assert Path(record.job_dir).parent.stat().st_mode & 0o777 == 0o755  # .mainboard/jobs
    assert (Path(local.root) / "made-by-job").stat().st_mode & 0o777 == 0o644


def test_local_cancel_stops_the_whole_job(local: Bridge) -> None:
    # Durations no other test uses, so the check below sees only this test's processes.
    polite = local.submit(command="sleep 300.4711 & sleep 301.4711; wait", name="polite")
    stubborn = local.submit(command="trap '' TERM; sleep 302.4711", name="stubborn")
    wait_for(local, [polite, stubborn], until="running")
    local.cancel_grace_s = 1  # type: ignore[attr-defined]  # TERM is ignored: KILL after 1 s
    local.cancel([polite, stubborn])
    found = local.poll([polite, stubborn])
    assert found[polite.job_id].state is JobState.CANCELLED
    assert found[polite.job_id].exit_code == 143  # the script saw the command end on TERM
    assert (found[stubborn.job_id].state, found[stubborn.job_id].exit_code) == (
        JobState.CANCELLED, None)  # killed: no exit code, but the marker says why
    left = subprocess.run(["pgrep", "-f", r"sleep 30[012]\.4711"], capture_output=True,
                          text=True)
    assert left.stdout == ""


def test_local_walltime_is_enforced_and_retire_comes_first(local: Bridge) -> None:
    slow = local.submit(command="sleep 30", walltime=1, name="slow")
    retiring = local.submit(
        command="trap 'echo retired; exit 0' USR1; for i in $(seq 50); do sleep 0.1; done",
        walltime=3, retire_before=2, retire_signal="USR1", name="worker")
    found = wait_for(local, [slow, retiring], timeout=30)
    assert (found[slow.job_id].state, found[slow.job_id].reason) == (
        JobState.TIMEOUT, "killed at walltime")
    assert found[retiring.job_id].state is JobState.COMPLETED  # finished before walltime
    assert local.logs(retiring) == "retired\n"


@pytest.fixture
def ssh_bridge(sshd_server: SshServer, tmp_path: Path) -> Iterator[Bridge]:
    """A RemoteBridge over real paramiko to the loopback sshd, with a hostile root."""
    from mainboard.bridges import ssh
    host = SshHost(host=sshd_server.host, port=sshd_server.port, user=sshd_server.user,
                   identity=str(sshd_server.identity),
                   known_hosts=str(sshd_server.known_hosts(tmp_path / "known_hosts")),
                   root=str(tmp_path / "ssh root'; $(x)"))
    bridge = bridge_for("box", host, ssh.SshTransport.from_params(host.ssh_params(), "box"))
    yield bridge
    bridge.transport.close()


def test_ssh_job_is_detached_and_records_pid_and_exit_code_on_the_host(
        ssh_bridge: Bridge, tmp_path: Path) -> None:
    from mainboard.bridges import ssh
    record = ssh_bridge.submit(command="sleep 1; echo done; exit 5", name="remote")
    assert record.kind == "ssh" and record.job_dir.startswith(str(tmp_path / "ssh root'; $(x)"))
    ssh.close_all()  # the connection that launched it is gone
    job_dir = Path(record.job_dir)
    assert running(job_dir / "pid", str(job_dir / "job.sh"))
    again = bridge_for("box", ssh_bridge.host,
                       ssh.SshTransport.from_params(ssh_bridge.host.ssh_params(), "box"))
    try:
        status = wait_for(again, [record.job_id])[record.job_id]  # a bare id is enough here
        assert (status.state, status.exit_code) == (JobState.FAILED, 5)
        assert again.logs(record, tail=1) == "done\n"
    finally:
        again.transport.close()
    assert (job_dir / "exit_code").read_text() == "5\n"
    assert (job_dir / "pid").read_text().strip().isdigit()


def test_ssh_root_with_a_tilde_is_resolved_on_the_host(sshd_server: SshServer,
                                                        ssh_bridge: Bridge) -> None:
    from mainboard.bridges import ssh
    folder = f"mb-bridge-test-{uuid.uuid4().hex[:8]}"
    host = ssh_bridge.host.model_copy(update={"root": f"~/{folder}/it's"})
    bridge = bridge_for("box", host, ssh.SshTransport.from_params(host.ssh_params(), "box"))
    home = Path(os.path.expanduser(f"~{sshd_server.user}"))
    try:
        record = bridge.submit(command="pwd", name="where")
        assert wait_for(bridge, [record])[record.job_id].state is JobState.COMPLETED
        assert bridge.root == str(home / folder / "it's")
        assert bridge.logs(record) == f"{home / folder}/it's\n"
    finally:
        bridge.transport.close()
        shutil.rmtree(home / folder, ignore_errors=True)


def test_ssh_cancel(ssh_bridge: Bridge) -> None:
    record = ssh_bridge.submit(command="sleep 303", name="long")
    wait_for(ssh_bridge, [record], until="running")
    ssh_bridge.cancel([record.job_id])
    status = ssh_bridge.poll([record])[record.job_id]
    assert (status.state, status.exit_code) == (JobState.CANCELLED, 143)
    assert subprocess.run(["pgrep", "-f", "sleep 303"], capture_output=True).returncode == 1


def test_record_round_trips_through_json(local: Bridge) -> None:
    record = local.submit(command="true", name="x", walltime="1m", env={"A": "b"})
    again = JobRecord.model_validate(json.loads(record.model_dump_json()))
    assert again == record and again.spec.walltime == 60
    wait_for(local, [again])
    assert os.path.exists(again.paths.exit_code)
