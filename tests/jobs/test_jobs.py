"""Jobs on every host kind, for real: local processes, a real sshd, a real SLURM, PBS wrappers.

Submit/wait/logs/pull with data going out and a result coming back; walltime kills
reported as ``timeout``; attempt-driven escalation reaching the scheduler; queue
refusals that open no connection; hostile names and commands; and the ``mainboard
jobs`` verbs run as fresh processes reading only the receipts.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mainboard.board import Board
from mainboard.bridges import ssh
from mainboard.bridges.jobstate import JobState, JobStatus
from mainboard.cli import cli
from mainboard.errors import QueuePolicyError, UnknownJob, UserError, WaitTimedOut
from mainboard.jobs.job import Job
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.jobs_workspace import job_files, make_workspace, wait_running, wait_until
from tests.support.services import SlurmCluster, SshServer
from tests.support.workspace import run_cli

pytestmark = pytest.mark.live
HOSTILE = "a'; echo pwned"


def _invoke(config: Path, *args: str) -> Result:
    """The real `mainboard` command run in this process (faster than a fresh interpreter)."""
    return CliRunner().invoke(cli, ["--config", str(config), *args])


@pytest.fixture
def board(tmp_path: Path, sshd_server: SshServer,
          slurm_cluster: SlurmCluster) -> Iterator[Board]:  # noqa: F811
    with Board(make_workspace(tmp_path, sshd=sshd_server, slurm=slurm_cluster)) as found:
        yield found


@pytest.mark.parametrize("host", ["scratch", "edge", "hpc", "pbs"])
def test_submit_wait_logs_pull_on_every_kind(board: Board, host: str) -> None:
    ok = board.on(host).submit(
        'mkdir -p out && tr a-z A-Z < in/d.txt > out/r.txt && cat in/d.txt && echo err >&2',
        name="ok", data=["in/d.txt"], fetch=["out/r.txt", "out/never.txt"])
    bad = board.on(host).submit(["sh", "-c", "echo failing; exit 3"], name="bad")
    assert not (board.config.root / "out").exists()  # nothing came back on its own
    assert ok.wait(timeout=90, poll=0.5) is JobState.COMPLETED
    assert bad.wait(timeout=90, poll=0.5) is JobState.FAILED
    assert (ok.view().exit_code, bad.view().exit_code) == (0, 3)
    assert ok.logs() == "hello\n" and ok.logs(stream="stderr") == "err\n"
    assert bad.logs(tail=1) == "failing\n"
    pulled = ok.pull()
    assert (pulled.paths, pulled.missing, pulled.in_place) == (["out/r.txt"], ["out/never.txt"],
                                                               False)
    assert (board.config.root / "out" / "r.txt").read_text() == "HELLO\n"
    again = Job(board, ok.id)  # a new handle knows everything from the receipts alone
    assert (again.host, again.name, again.view().state, again.view().pulled) == (
        host, "ok", JobState.COMPLETED, pulled)


def test_data_the_mirror_does_not_carry_still_travels(board: Board, tmp_path: Path) -> None:
    root = board.config.root
    (root / ".gitignore").write_text("big/\n")
    (root / "big").mkdir()
    (root / "big" / "blob.bin").write_bytes(bytes(range(256)) * 64)
    job = board.on("edge").submit("cksum < big/blob.bin; cat in/d.txt", name="cksum",
                                  data=["big", "in/d.txt"])
    assert job.wait(timeout=60, poll=0.3) is JobState.COMPLETED
    expected = subprocess.run(["cksum"], input=(root / "big" / "blob.bin").read_bytes(),
                              capture_output=True, check=True).stdout.decode()
    assert job.logs() == expected + "hello\n"
    manifest = json.loads((board.config.state_dir / "mirror" / "edge.json").read_text())
    assert "in/d.txt" in manifest["files"] and "big/blob.bin" not in manifest["files"]
    assert not any((tmp_path / "edge-root" / ".mainboard" / "uploads").iterdir())


def test_local_in_place_wait_progress_and_wait_timeout(board: Board) -> None:
    job = board.on("local").submit("sleep 30", name="sleeper")
    seen: list[JobStatus] = []
    with pytest.raises(WaitTimedOut, match=f"job {job.id} on local is still running"):
        job.wait(timeout=1.0, poll=0.2, progress=seen.append)
    assert [s.state for s in seen] == [JobState.RUNNING]
    assert job.cancel() is JobState.CANCELLED
    assert job.wait(timeout=5) is JobState.CANCELLED  # the recorded verdict
    done = board.on("local").submit("echo made > result.txt", fetch=["result.txt"])
    assert done.wait(timeout=30, poll=0.2) is JobState.COMPLETED
    pulled = done.pull()  # the job ran in the workspace itself: nothing to copy
    assert (pulled.paths, pulled.in_place) == (["result.txt"], True)
    assert (board.config.root / "result.txt").read_text() == "made\n"


def test_walltime_kill_is_timeout_locally_and_on_slurm(board: Board,
                                                      slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    local = board.on("scratch").submit("sleep 60", walltime=1, name="late")
    slurm = board.on("hpc").submit("sleep 300", walltime="2m", queue="short", name="late")
    assert local.wait(timeout=30, poll=0.5) is JobState.TIMEOUT  # the script's watchdog
    wait_running(slurm)
    # SLURM counts walltime in minutes; move the running job's end to now and let
    # slurmctld's own time-limit check kill it (it does so within its 30 s sweep).
    subprocess.run(["scontrol", "update", f"JobId={slurm.view().submitted.job_id}",
                    "EndTime=now"], env=slurm_cluster.env, check=True)
    assert slurm.wait(timeout=90, poll=1.0) is JobState.TIMEOUT
    assert slurm.view().native == "TIMEOUT"


def test_attempt_escalates_memory_from_host_defaults(board: Board,
                                                    slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    config = board.config.path
    assert config is not None
    asked = []
    for attempt in (1, 2):
        done = run_cli(config, "submit", "--on", "scratch", "--attempt", str(attempt), "--", "true")
        assert done.returncode == 0, done.stderr
        shown = json.loads(_invoke(config, "jobs", "show", done.stdout.strip(), "--json").stdout)
        asked.append(shown["spec"]["mem_gb"])
    asked.append(board.on("scratch").submit("true", attempt=3).view().submitted.spec["mem_gb"])
    assert asked == [50, 100, 100]  # mem-gb = "min(100, attempt * 50)"
    memory = []
    for attempt in (1, 2):
        job = board.on("hpc").submit("true", attempt=attempt)
        shown = subprocess.run(["scontrol", "show", "job", job.view().submitted.job_id],
                               env=slurm_cluster.env, capture_output=True, text=True, check=True)
        memory.append(shown.stdout.split("MinMemoryNode=")[1].split()[0])
    assert memory == ["512M", "1G"]  # what sbatch was given: min(1.5, attempt * 0.5) GB
    with pytest.raises(QueuePolicyError, match=r"queue 'debug' refuses job 'true' \(attempt 3\): "
                                               r"mem-gb 1.5 is over mem-ceiling-gb 1.2"):
        board.on("hpc").submit("true", attempt=3)


@pytest.fixture
def silent_port() -> Iterator[socket.socket]:
    """A listening socket nobody accepts on: any connection attempt would be queued here."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    yield listener
    listener.close()


def test_policy_refusals_open_no_connection(tmp_path: Path,
                                            silent_port: socket.socket) -> None:
    far = {"kind": "ssh", "host": "127.0.0.1", "port": silent_port.getsockname()[1],
           "user": "root", "known_hosts": str(tmp_path / "kh"), "root": "/srv/mb"}
    config = make_workspace(tmp_path, extra_hosts={"far": far}, extra=(
        '\n[hosts.far.defaults]\nmem-gb = "min(100, attempt * 50)"\n'
        '[hosts.far.queues.short]\nmax-walltime = "1h"\nmem-ceiling-gb = 64\n'
        '[hosts.far.queues.long]\nmax-walltime = "24h"\nmem-ceiling-gb = 64\n'))
    ssh.close_all()
    with Board(config) as board:
        host = board.on("far")
        with pytest.raises(QueuePolicyError, match=r"queue 'short' refuses job 'fit' \(attempt 1\)"
                           r": walltime 2:00:00 is over max-walltime 1:00:00; queues that "
                           r"would fit: long \(max-walltime 1-00:00:00"):
            host.submit("python fit.py", name="fit", queue="short", walltime="2h")
        with pytest.raises(QueuePolicyError, match=r"attempt 2\): mem-gb 100 is over "
                                                   r"mem-ceiling-gb 64; no declared queue fits"):
            host.submit("python fit.py", name="fit", queue="long", attempt=2)
        with pytest.raises(QueuePolicyError, match="unknown queue 'gpu'.*declared queues: short"):
            host.submit("true", queue="gpu")
        with pytest.raises(UserError, match="data path 'in/nope.txt' does not exist"):
            host.submit("true", data=["in/nope.txt"])
        for bad in ("../up.txt", "/etc/passwd", "a/../../b", "."):
            with pytest.raises(UserError, match="fetch path"):
                host.submit("true", fetch=[bad])
        assert not ssh._POOL  # no pooled ssh connection was ever made
        cli = run_cli(config, "submit", "--on", "far", "--queue", "short", "--walltime", "2h",
                      "--", "true")
        assert cli.returncode == 2 and "max-walltime 1:00:00" in cli.stderr, cli.stderr
        with pytest.raises(BlockingIOError):
            silent_port.accept()  # not one TCP connection reached the host's address
        assert job_files(board) == []


@pytest.mark.parametrize("host", ["edge", "hpc"])
def test_hostile_names_and_commands_stay_literal(board: Board, tmp_path: Path, host: str) -> None:
    mark = tmp_path / "pwned"
    words = [f"$(touch {mark})", HOSTILE, f"`touch {mark}`"]
    odd = f"{HOSTILE} $(touch PWNED) `touch PWNED`.txt"  # data and fetch path: argv throughout
    (board.config.root / "in" / odd).write_text("odd\n")
    job = board.on(host).submit(["sh", "-c", 'printf "%s|" "$@"; mkdir -p out; '
                                 'cp "in/$0" "out/$0"', odd, *words], name=HOSTILE,
                                data=[f"in/{odd}"], fetch=[f"out/{odd}"])
    assert job.wait(timeout=60, poll=0.5) is JobState.COMPLETED
    assert job.logs() == "".join(f"{w}|" for w in words)
    assert job.pull().paths == [f"out/{odd}"]
    assert (board.config.root / "out" / odd).read_text() == "odd\n"
    assert job.name == HOSTILE and "'" not in job.id and ";" not in job.id
    config = board.config.path
    assert config is not None
    cli = run_cli(config, "submit", "--on", host, "--name", HOSTILE, "--", "echo", words[0])
    assert cli.returncode == 0, cli.stderr
    shown = json.loads(_invoke(config, "jobs", "show", cli.stdout.strip(), "--refresh",
                               "--json").stdout)
    assert shown["name"] == HOSTILE and shown["spec"]["command"] == ["echo", words[0]]
    again = Job(board, cli.stdout.strip())
    assert again.wait(timeout=60, poll=0.5) is JobState.COMPLETED
    assert again.logs() == f"{words[0]}\n" and not mark.exists()
    assert not list(tmp_path.rglob("PWNED"))


def test_a_finished_slurm_job_is_completed_in_jobs_list_with_no_monitor_pass(
        board: Board, slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    """`jobs list` asks SLURM (one query) once SLURM itself says the job completed."""
    config = board.config.path
    assert config is not None
    job = board.on("hpc").submit(["sh", "-c", "echo hello; sleep 1"], name="one-second")

    def slurm_says_completed() -> bool:
        shown = subprocess.run(["squeue", "-h", "-t", "all", "-j", job.view().submitted.job_id,
                                "-o", "%T"], env=slurm_cluster.env, capture_output=True,
                               text=True, check=True)
        return shown.stdout.strip() == "COMPLETED"

    wait_until(slurm_says_completed, "SLURM reports the job COMPLETED", timeout=90)
    assert _topics(board, job) == ["job.submitted", "job.cost"]  # nobody asked since
    listed = json.loads(_invoke(config, "jobs", "list", "--host", "hpc", "--json").stdout)
    row = next(j for j in listed["jobs"] if j["id"] == job.id)
    assert (row["state"], row["exit_code"], row["stale"], listed["unreachable_hosts"]) == (
        "completed", 0, False, {})
    assert _topics(board, job).count("job.finished") == 1


def test_jobs_verbs_from_fresh_processes(board: Board) -> None:
    config = board.config.path
    assert config is not None
    waited = run_cli(config, "submit", "--wait", "--on", "local", "--name", "made", "--fetch",
                     "two.txt", "--", "echo one; echo two > two.txt")
    assert waited.returncode == 0 and "completed (exit code 0" in waited.stderr, waited.stderr
    made = Job(board, waited.stdout.strip())
    listed = json.loads(run_cli(config, "jobs", "list", "--json").stdout)
    assert [(j["id"], j["state"], j["exit_code"]) for j in listed["jobs"]] == [
        (made.id, "completed", 0)] and listed["errors"] == []
    # The other verbs in this process (click's runner): they too start from the receipts.
    assert _invoke(config, "jobs", "logs", made.id[-6:], "--tail", "1").stdout == "one\n"
    pulled = json.loads(_invoke(config, "jobs", "pull", made.id, "--json").stdout)
    assert (pulled["paths"], pulled["in_place"]) == (["two.txt"], True)
    sleeper = run_cli(config, "submit", "--on", "local", "--", "sleep", "60").stdout.strip()
    wait_running(Job(board, sleeper))  # the submitting process is gone; the job is not
    cancelled = json.loads(_invoke(config, "jobs", "cancel", sleeper, "--json").stdout)
    assert cancelled == {"id": sleeper, "host": "local", "job_id": sleeper, "state": "cancelled"}
    table = _invoke(config, "jobs", "list").stdout
    assert sleeper in table and "cancelled" in table
    refused = _invoke(config, "jobs", "show", HOSTILE)
    assert refused.exit_code == 2 and "mainboard: error: \"a'; echo pwned\" is not a job id" \
        in refused.stderr, refused.stderr
    for ref in ("../../etc/passwd", "nosuch"):
        with pytest.raises(UnknownJob):
            Job(board, ref)


def test_corrupt_receipt_line_is_named_and_the_rest_still_read(board: Board) -> None:
    config = board.config.path
    assert config is not None
    first = board.on("local").submit("exit 4", name="first")
    second = board.on("local").submit("true", name="second")
    assert first.wait(timeout=30, poll=0.2) is JobState.FAILED
    assert second.wait(timeout=30, poll=0.2) is JobState.COMPLETED
    path = board.config.state_dir / "jobs" / f"{first.id}.ndjson"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "{not json\n" + "".join(lines[1:]))  # line 2 is now garbage
    listed = run_cli(config, "jobs", "list", "--json")
    data = json.loads(listed.stdout)
    assert [(j["name"], j["state"]) for j in data["jobs"]] == [("first", "failed"),
                                                               ("second", "completed")]
    assert len(data["errors"]) == 1 and data["errors"][0].startswith(f"{path}:2: not a JSON")
    human = _invoke(config, "jobs", "list")
    assert f"warning: {path}:2:" in human.stderr and "second" in human.stdout
    path.write_text(lines[0].replace('"job.submitted"', '"job.sumbitted"'))
    data = json.loads(_invoke(config, "jobs", "list", "--json").stdout)
    assert [j["name"] for j in data["jobs"]] == ["second"]
    assert data["errors"][0].startswith(f"{path}:1: unknown receipt topic 'job.sumbitted'")


def _topics(board: Board, job: Job) -> list[str]:
    """The topics of a job's receipt lines, parsed without mainboard.receipts."""
    path = board.config.state_dir / "jobs" / f"{job.id}.ndjson"
    return [json.loads(line)["topic"] for line in path.read_text().splitlines()]


def test_ssh_job_outlives_its_submitter_and_finds_the_mirrored_workspace(
        board: Board, tmp_path: Path) -> None:
    """No ``data`` given: the submit still mirrors the workspace (the code the job runs);
    the job is nohup'd on the host with its pid and exit code written there, outlives the
    `mainboard submit` process, and each state change is one receipt line."""
    config = board.config.path
    assert config is not None
    (board.config.root / "tool.sh").write_text("echo v1\n")
    gate = tmp_path / "edge-root" / "gate"
    done = run_cli(config, "submit", "--on", "edge", "--fetch", "out/t.txt", "--",
                   "while [ ! -e gate ]; do sleep 0.1; done; mkdir -p out; sh tool.sh | tee "
                   "out/t.txt; exit 5")
    assert done.returncode == 0, done.stderr
    job = Job(board, done.stdout.strip())
    wait_running(job)  # the submitting process (and its ssh connection) is gone
    job_dir = Path(job.view().submitted.job_dir)
    assert (job_dir / "pid").read_text().strip().isdigit()
    gate.touch()
    assert job.wait(timeout=60, poll=0.3) is JobState.FAILED
    assert ((job_dir / "exit_code").read_text(), job.view().exit_code) == ("5\n", 5)
    for _ in range(3):
        assert job.status() is JobState.FAILED  # asking again records nothing
    assert job.pull().paths == ["out/t.txt"] and job.logs() == "v1\n"
    assert _topics(board, job) == ["job.submitted", "job.cost", "job.state", "job.finished",
                                   "job.cost", "job.pulled"]  # costs: at submit, at the end
    # Without a sync the host keeps what it has; with one (the default) the change goes.
    (board.config.root / "tool.sh").write_text("echo v2\n")
    stale = Job(board, _invoke(config, "submit", "--on", "edge", "--no-sync", "--",
                               "sh", "tool.sh").stdout.strip())
    assert stale.wait(timeout=60, poll=0.3) is JobState.COMPLETED and stale.logs() == "v1\n"
    fresh = board.on("edge").submit(["sh", "tool.sh"])
    assert fresh.wait(timeout=60, poll=0.3) is JobState.COMPLETED and fresh.logs() == "v2\n"


def test_secret_env_reaches_the_job_but_never_its_receipts(board: Board) -> None:
    secret, password = "hf_" + "x9" * 10, "br0ker-pw"
    env = {"HF_TOKEN": secret, "BROKER": f"redis://:{password}@127.0.0.1:7/0", "SEED": "7"}
    job = board.on("scratch").submit('printf "%s|%s|%s" "$HF_TOKEN" "$BROKER" "$SEED"',
                                     name="env", env=env)
    assert job.wait(timeout=30, poll=0.2) is JobState.COMPLETED
    assert job.logs() == f"{secret}|{env['BROKER']}|7"
    receipts = (board.config.state_dir / "jobs" / f"{job.id}.ndjson").read_text()
    assert secret not in receipts and password not in receipts
    config = board.config.path
    assert config is not None
    shown = _invoke(config, "jobs", "show", job.id)
    assert secret not in shown.stdout and password not in shown.stdout
    recorded = json.loads(_invoke(config, "jobs", "show", job.id, "--json").stdout)["spec"]["env"]
    assert recorded == {"HF_TOKEN": "***", "BROKER": "redis://:***@127.0.0.1:7/0", "SEED": "7"}


def test_cli_modules_import_nothing_heavy_at_top_level() -> None:
    """`mainboard --help` stays fast: the job verbs import their machinery when they run."""
    import ast

    import mainboard.cli as package

    light = {"__future__", "json", "shlex", "datetime", "collections.abc", "contextlib", "pathlib",
             "typing", "click", "mainboard.redact"}  # redact is stdlib-only
    # cli/common.py (what every verb repeats) may be imported at the top: it is light too.
    for verb in ("common", "submit", "jobs", "monitor", "batch"):
        tree = ast.parse((Path(package.__file__).parent / f"{verb}.py").read_text())
        top = {alias.name for node in tree.body if isinstance(node, ast.Import)
               for alias in node.names}
        top |= {node.module or "" for node in tree.body if isinstance(node, ast.ImportFrom)}
        assert top <= light, (verb, top - light)
        light.add("mainboard.cli")  # from mainboard.cli import common


def test_pull_takes_only_the_fetch_paths_whatever_the_host_packs(tmp_path: Path) -> None:
    """The results archive is packed on the host: a host whose ``tar`` adds more (here a
    wrapper first on its PATH adding mainboard.toml) cannot overwrite the workspace."""
    tar = shutil.which("tar")
    assert tar is not None
    tools = tmp_path / "evil-bin"
    tools.mkdir()
    (tools / "tar").write_text(
        '#!/bin/sh\nif [ "$1" = -czf ]; then out=$2; shift 3; echo hijacked > mainboard.toml; '
        f'exec {tar} -czf "$out" -- "$@" mainboard.toml; fi\nexec {tar} "$@"\n')
    (tools / "tar").chmod(0o755)
    config = make_workspace(tmp_path, extra_hosts={"evil": {
        "kind": "local", "root": str(tmp_path / "evil-root")}},
        extra=f'\n[hosts.evil.env]\nPATH = "{tools}:/usr/bin:/bin"\n')
    before = config.read_text()
    with Board(config) as board:
        job = board.on("evil").submit("mkdir -p out && echo r > out/r.txt", fetch=["out"])
        assert job.wait(timeout=30, poll=0.2) is JobState.COMPLETED
        assert job.pull().paths == ["out"]
    assert (tmp_path / "evil-root" / "mainboard.toml").read_text() == "hijacked\n"
    assert config.read_text() == before and (config.parent / "out" / "r.txt").read_text() == "r\n"
