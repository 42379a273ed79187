"""Local workers as `mainboard integrate` starts them: secrets stay off the command line."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mainboard.config import Config
from mainboard.config.brokerurl import BROKER_URL_ENV
from mainboard.errors import UnknownRun
from mainboard.names import GC_HOLD_ENV
from mainboard.runs.store import RunStore
from mainboard.tasks import worker_main
from mainboard.tasks.app import make_app
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import write_workspace
from tests.support.services import RedisServer, start_redis
from tests.support.workspace import run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.live
def test_broker_password_reaches_workers_by_environment_only(tmp_path: Path) -> None:
    password = "pw-" + secrets.token_hex(12)
    server = start_redis(tmp_path / "redis", password=password)
    workers = LocalWorkers(1, server.url, tmp_path / "logs")
    try:
        workers.start()
        pid = workers.procs[0].pid
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode()
        assert password not in cmdline and "-Q\0mainboard.batches" in cmdline
        assert f"MAINBOARD_BROKER_URL={server.url}" in environ.split("\0")
        log = tmp_path / "logs" / f"{workers.nodes[0].split('@')[0]}.log"
        deadline = time.monotonic() + 60
        while not (log.exists() and " ready." in log.read_text()):  # it authenticated
            assert workers.procs[0].poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "worker not ready after 60 s"
            time.sleep(0.1)
        text = log.read_text()
        assert " ready." in text and password not in text
        # mainboard.tasks.worker_main names the node as `celery worker -n` does (%h: this host)
        node = workers.nodes[0].replace("%h", socket.gethostname())
        assert f"{node} ready." in text
    finally:
        workers.stop()
        server.stop()


@pytest.mark.parametrize("hostile", ["a'; echo pwned", "../../etc", "x y", "-rf", ".hidden"])
def test_hostile_run_names_are_refused(hostile: str, tmp_path: Path,
                                       redis_server: RedisServer) -> None:
    workspace: Config = write_workspace(tmp_path / "ws", redis_server)
    with pytest.raises(UnknownRun, match="no run matches"):
        RunStore(workspace.state_dir).find(hostile)
    assert workspace.path is not None
    done = run_cli(workspace.path, "runs", "show", "--", hostile)
    assert done.returncode == 2 and "no run matches" in done.stderr
    assert "pwned" not in done.stdout


@pytest.mark.live
@pytest.mark.timeout(240)  # far below the 600 s broadcast: waiting it out fails the test
def test_nobody_listens_until_a_worker_subscribes(tmp_path: Path) -> None:
    """A broker without a subscriber is answered at once (no broadcast waited out); a real
    worker's remote-control subscription, or any subscriber, makes it ask."""
    import redis

    from mainboard.tasks.app import make_app
    from mainboard.tasks.workers import fleet_size, nobody_listens

    server = start_redis(tmp_path / "redis")  # its own: no other test's subscribers
    r = redis.Redis.from_url(server.url)
    app = make_app(broker_url=server.url)
    workers = LocalWorkers(1, server.url, tmp_path / "logs")
    try:
        assert nobody_listens(r)
        assert fleet_size(app, timeout=600.0, r=r) == 0  # not the broadcast's 600 s timeout
        pubsub = redis.Redis.from_url(server.url).pubsub()
        pubsub.subscribe("anything")
        pubsub.get_message(timeout=1.0)
        assert not nobody_listens(r)
        pubsub.close()
        workers.start()
        deadline = time.monotonic() + 120
        while not fleet_size(app, timeout=1.0, r=r):
            assert time.monotonic() < deadline, "the worker never answered"
        assert not nobody_listens(r)
    finally:
        workers.stop()
        app.close()
        r.close()
        server.stop()


@pytest.mark.live
def test_stop_without_waiting_returns_and_the_workers_still_exit(tmp_path: Path,
                                                                  redis_server: RedisServer
                                                                  ) -> None:
    workers = LocalWorkers(2, redis_server.url, tmp_path / "logs").start()
    procs = list(workers.procs)
    workers.stop(wait=False)
    assert workers.procs == [] and workers.exited() == 0
    deadline = time.monotonic() + 60
    while any(p.poll() is None for p in procs):  # reaped by the stop's thread
        assert time.monotonic() < deadline, "local workers still running after 60 s"
        time.sleep(0.1)


@pytest.mark.parametrize(("argv", "said"), [
    (["-c", "0"], "-c 0: the pool needs at least 1 process"),
    (["-P", "gevent"], "invalid choice: 'gevent'"),
    (["-Q", ","], "give one or more names, comma-separated"),
    (["--beat"], "unrecognized arguments: --beat"),
])
def test_a_bad_worker_option_is_one_line_and_exit_2(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        worker_main.main(argv)
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m mainboard.tasks.worker_main: ") and said in line


@pytest.mark.live
def test_a_worker_has_its_collector_back_frozen_once_ready_in_parent_and_pool_child(
        tmp_path: Path, redis_server: RedisServer) -> None:
    """worker_main holds the garbage collector off while it starts (mainboard/names.hold_gc);
    the process that runs tasks has it on again with the start's objects frozen: the
    parent itself (solo pool, released when ready) and a prefork pool child (released as
    it starts); ``MAINBOARD_GC_HOLD=0`` leaves it as Python sets it."""
    app = make_app(broker_url=redis_server.url)
    kinds = {"solo": {}, "prefork": {}, "unheld": {GC_HOLD_ENV: "0"}}
    procs = {}
    for kind, extra in kinds.items():
        env = {**os.environ, BROKER_URL_ENV: redis_server.url, "PYTHONPATH": str(ROOT), **extra}
        pool = "solo" if kind == "solo" else "prefork"
        argv = [sys.executable, "-m", "mainboard.tasks.worker_main", "-I",
                "tests.support.app_probe_tasks", "-P", pool, "-c", "1", "-n",
                f"gc-{kind}-{tmp_path.name}@%h", "-Q", f"gc-{kind}-{tmp_path.name}",
                "--without-mingle", "--without-gossip"]
        with (tmp_path / f"{kind}.log").open("wb") as log:
            procs[kind] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        got = {kind: app.send_task("probe.gc", queue=f"gc-{kind}-{tmp_path.name}").get(timeout=120)
               for kind in kinds}
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(60)
        app.close()
    assert got["solo"]["enabled"] and got["solo"]["frozen"] > 10_000, got
    assert got["prefork"]["enabled"] and got["prefork"]["frozen"] > 10_000, got
    assert got["unheld"] == {"enabled": True, "frozen": 0}, got
