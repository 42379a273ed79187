"""Bad inputs to `fleet up`, each with one clear line: unknown host, bad walltime, queue
policy (refused before any connection), an unreachable host and a root that cannot be
made (the rest of the fleet still comes up), a root that does not exist yet (created),
and a hostile host name that must not inject shell text.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from mainboard.fleet.launch import WORKER_MODULES, BrokerRoute, UpOptions, worker_command
from mainboard.fleet.records import host_queue, node_prefix
from tests.support.fleet_helpers import (
    assert_nothing_left,
    cli,
    nodes_of,
    probe,
    processes_matching,
    ssh_host,
    status,
    table,
    tear_down,
    wait_until,
    workspace,
)
from tests.support.services import SshServer, free_port

pytestmark = pytest.mark.timeout(300)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("mainboard: error:")]


def test_unknown_host_is_refused_before_anything_starts(tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws", table("hosts.lo", kind="ssh", host="127.0.0.1",
                                          port=free_port()))
    done = cli(ws, "fleet", "up", "--on", "nope")
    assert done.returncode == 2 and done.stdout == ""
    assert _error_lines(done.stderr) == done.stderr.strip().splitlines()
    assert "unknown host 'nope'" in done.stderr and "declared hosts: local, lo" in done.stderr
    assert not (ws / ".mainboard" / "fleet.ndjson").exists()
    assert not processes_matching(str(ws))  # no broker was started for it


@pytest.mark.parametrize(("args", "expect"), [
    (["--walltime", "2x"], "--walltime '2x': not a duration; valid: \"HH:MM:SS\""),
    (["--walltime", "0"], "--walltime '0': must be greater than zero"),
    (["--walltime", "2m", "--retire-before", "5m"], "is not shorter than the walltime 0:02:00"),
    (["--queues", "a b"], "--queues: 'a b' is not a queue name"),
    (["--workers", "0"], "--workers 0: valid: an integer >= 1"),
])
def test_bad_options_give_one_line_naming_the_flag(tmp_path: Path, args: list[str],
                                                   expect: str) -> None:
    ws = workspace(tmp_path / "ws")
    done = cli(ws, "fleet", "up", "--on", "local", *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], lines
    assert not (ws / ".mainboard" / "fleet.ndjson").exists()


def test_queue_limits_are_refused_before_any_connection(tmp_path: Path) -> None:
    with socket.socket() as listener:  # where the login node would be: counts connections
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        ws = workspace(
            tmp_path / "ws",
            table("hosts.hpc", kind="slurm", login="ssh", host="127.0.0.1",
                  port=listener.getsockname()[1], user="root"),
            table("hosts.hpc.defaults", queue="short"),
            table("hosts.hpc.queues.short", **{"max-walltime": "10m", "mem-ceiling-gb": 4}))
        done = cli(ws, "fleet", "up", "--on", "hpc", "--walltime", "2h")
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody knocked
    assert done.returncode == 2
    assert "queue 'short' refuses job" in done.stderr and "max-walltime 0:10:00" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_failing_hosts_get_one_line_each_and_the_rest_comes_up(tmp_path: Path,
                                                               sshd_server: SshServer) -> None:
    afile = tmp_path / "afile"
    afile.write_text("a file, not a directory\n")
    mark = tmp_path / "pwned"
    # Host names are plain words (a hostile one is refused at load, tests/support/config_cases.py);
    # the hostile value here is the host's root directory, quoted on every command line.
    hostile, hostile_root = "odd", f"x'; touch {mark} #\" $(touch {mark})"
    ws = workspace(
        tmp_path / "ws",
        table("hosts.local", kind="local", root="fresh/sub"),
        table(f"hosts.{hostile}", kind="local", root=hostile_root),
        table("hosts.gone", kind="ssh", host="127.0.0.1", port=free_port(), user="root",
              connect_timeout=3),
        ssh_host("badroot", sshd_server, afile / "root"))
    done = cli(ws, "fleet", "up", "--on", "local", "--on", hostile, "--on", "gone",
               "--on", "badroot", "--no-flower")
    try:
        assert done.returncode == 1, done.stderr
        errors = _error_lines(done.stderr)
        assert len(errors) == 2, done.stderr
        gone = next(e for e in errors if "host 'gone'" in e)
        assert "127.0.0.1" in gone
        bad = next(e for e in errors if "host 'badroot'" in e)
        assert "does not exist and cannot be created" in bad and str(afile) in bad
        assert (ws / "fresh" / "sub").is_dir()  # a missing root is created
        assert (ws / hostile_root).is_dir()
        assert probe(ws, "local")["host"] == "local"
        found = probe(ws, hostile)
        assert found["host"] == hostile  # named <kind>-<host>-<job id>@<machine> (Flower)
        assert found["node"].partition("@")[0] == f"{node_prefix('local', hostile)}-" \
            f"{found['job_id']}"
        assert not mark.exists()
        rows = wait_until(lambda: (r := status(ws)) and len(r) == 2 and r, 30, "two workers")
        assert {r["host"] for r in rows} == {"local", hostile}
        assert host_queue(hostile) in next(r for r in rows if r["host"] == hostile)["queues"]
    finally:
        rows = status(ws)
        assert tear_down(ws, "--timeout", "20").returncode == 0
    assert_nothing_left(ws, nodes_of(rows))
    assert not mark.exists()


def test_worker_command_keeps_the_url_out_of_argv_and_quotes_everything(tmp_path: Path) -> None:
    home = tmp_path / "r o'ot $(x)"
    home.mkdir()
    python = home / "py'thon"  # stands in for the env's python: records what it was given
    python.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$OUT"\n'
                      'printf "%s" "$MAINBOARD_BROKER_URL" > "$OUT.env"\n')
    python.chmod(0o755)
    secret = home / "1.broker"
    secret.write_text("redis://:pw@127.0.0.1:7001/0")
    text = worker_command(str(python), "mb-x-1", ["q1", "mainboard.host.a_b"], 2, str(secret))
    out = tmp_path / "argv"
    subprocess.run(["/bin/bash", "-c", text], env={"OUT": str(out), "PATH": "/usr/bin:/bin"},
                   check=True)
    argv = out.read_text().splitlines()
    assert argv[:3] == ["-m", "mainboard.tasks.worker_main", "-Q"]
    assert argv[3:7] == ["q1,mainboard.host.a_b", "-c", "2", "--pool=prefork"]
    assert "mb-x-1@%h" in argv and ",".join(WORKER_MODULES) in argv
    assert WORKER_MODULES[:2] == ("mainboard.tasks.fleet", "mainboard.tasks.stages")
    assert not any("pw" in a for a in argv)
    assert Path(f"{out}.env").read_text() == "redis://:pw@127.0.0.1:7001/0"
    # in a job, the node name ends with the scheduler's id, read when the job runs
    text = worker_command(str(python), "slurm-h'pc $(x)", ["q1"], 1, str(secret), job_suffix=True)
    subprocess.run(["/bin/bash", "-c", text], check=True, env={
        "OUT": str(out), "PATH": "/usr/bin:/bin", "MAINBOARD_JOB_ID": "12345"})
    argv = out.read_text().splitlines()
    assert argv[argv.index("-n") + 1] == "slurm-h'pc $(x)-12345@%h"


def test_a_tunnel_url_keeps_password_scheme_and_database() -> None:
    route = BrokerRoute("redis://:s3cr%40t@127.0.0.1:7001/3")
    assert route.loopback and route.port == 7001
    assert route.via_port(40123) == "redis://:s3cr%40t@127.0.0.1:40123/3"
    assert not BrokerRoute("rediss://redis.example.org:6380/0").loopback


def test_options_parse_durations_and_queues() -> None:
    parsed = UpOptions.parse(workers=3, queues="a, b,a", walltime="01:30:00",
                             retire_before="90s", idle_timeout="10m")
    assert parsed == UpOptions(3, ("a", "b"), 5400, 90, 600)
    assert UpOptions.parse().retire_before == 300
