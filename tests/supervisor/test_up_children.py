"""What `mainboard up` does with each child, one small real process at a time (``sh``
standing in for the dashboard; no broker fleet, no Celery): a dashboard that prints no
URL, one that ignores SIGTERM, a restart that fails, Ctrl-C while starting, a broker
found running and left so. tests/supervisor/test_up.py runs the whole thing for real.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from mainboard.config import Config, load_config
from mainboard.errors import FlowerError, SupervisorError
from mainboard.services.broker import EmbeddedBroker
from mainboard.supervisor import children
from mainboard.supervisor.children import DaemonChild, DashboardChild, WorkerChild
from mainboard.supervisor.up import Supervisor, UpOptions, _quietly
from mainboard.tasks.workers import LocalWorkers
from tests.support.services import RedisServer, require

SH = shutil.which("sh") or "/bin/sh"


def dashboard(tmp_path: Path, script: str) -> DashboardChild:
    """A dashboard child that runs ``sh -c SCRIPT`` (its stderr in dashboard.log)."""
    return DashboardChild([SH, "-c", script], tmp_path / "dashboard.log", dict(os.environ))


def test_a_dashboard_that_prints_its_url_is_up_until_stopped(tmp_path: Path) -> None:
    child = dashboard(tmp_path, 'echo \'{"url": "http://127.0.0.1:1/?token=t"}\'; exec sleep 30')
    child.stop()  # never started: nothing to stop
    child.start()
    try:
        assert child.url == "http://127.0.0.1:1/?token=t" and child.pid() is not None
    finally:
        child.stop()
    assert child.pid() is None and child.why([]) == "killed by SIGTERM"


def test_a_dashboard_that_prints_no_url_is_one_line_with_why_and_its_log(tmp_path: Path
                                                                         ) -> None:
    child = dashboard(tmp_path, "echo 'tornado: port taken' >&2; exit 3")
    with pytest.raises(SupervisorError) as caught:
        child.start()
    message = str(caught.value)
    assert "\n" not in message and "the dashboard printed no URL within 60s" in message
    assert "exited with code 3; log: tornado: port taken" in message
    assert str(tmp_path / "dashboard.log") in message and child.url is None


def test_a_silent_dashboard_is_given_up_on_and_one_ignoring_sigterm_is_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(children, "DASHBOARD_START_S", 0.1)
    silent = dashboard(tmp_path, "exec sleep 30")
    with pytest.raises(SupervisorError, match=r"no URL within 0s \(killed by SIGTERM\)"):
        silent.start()
    monkeypatch.setattr(children, "DASHBOARD_START_S", 60.0)
    monkeypatch.setattr(children, "STOP_GRACE_S", 0.2)
    # the line is printed once SIGTERM is ignored: no race with the stop that follows
    stubborn = dashboard(tmp_path, "trap '' TERM; echo not-json; exec sleep 30")
    with pytest.raises(SupervisorError, match=r"\(killed by SIGKILL"):
        stubborn.start()
    assert stubborn.pid() is None


def test_a_worker_slot_never_launched_and_a_daemon_never_started(tmp_path: Path) -> None:
    workers = LocalWorkers(1, "redis://127.0.0.1:1/0", tmp_path / "workers", prefix="up")
    slot = WorkerChild(workers, 0)
    slot.stop()  # nothing launched: nothing to stop
    assert (slot.pid(), slot.exit_code(), slot.why([])) == (None, None, "process gone")
    assert slot.name == f"worker {workers.nodes[0].split('@')[0]}"
    broker = EmbeddedBroker(tmp_path / ".mainboard")
    daemon = DaemonChild("broker", broker, broker.up, broker.down)
    assert (daemon.pid(), daemon.exit_code(), daemon.why([])) == (None, None, "process gone")


def test_a_child_that_does_not_start_again_is_told_and_counted(tmp_path: Path) -> None:
    config = Config(root=tmp_path)
    said: list[str] = []
    sup = Supervisor(config, UpOptions(max_restarts=1, window_s=60), said.append)
    sup.dir.mkdir(parents=True)
    child = dashboard(tmp_path, "exit 4")
    sup.children.append(child)
    sup.deaths[child.name] = collections.deque()
    sup._restart(child)
    assert len(said) == 1 and said[0].startswith("dashboard died (process gone) and did not "
                                                 "start again (1 of 1 restarts within 60 s): ")
    assert "exited with code 4" in said[0]
    assert json.loads(sup.state_path.read_text())["children"]["dashboard"]["running"] is False
    with pytest.raises(SupervisorError, match="dashboard died 2 times within 60 s"):
        sup._restart(child)  # past the budget: the crash loop ends everything
    forgetful = Supervisor(config, UpOptions(max_restarts=1, window_s=0), said.append)
    forgetful.deaths[child.name] = collections.deque()
    for _ in range(2):  # each death leaves the window before the next: never a crash loop
        forgetful._restart(child)
    assert said[-1].startswith("dashboard died (exited with code 4) and did not start again "
                               "(1 of 1 restarts within 0 s)")


def test_the_dashboard_child_gets_a_private_token_file_and_no_config_flag_without_one(
        tmp_path: Path) -> None:
    sup = Supervisor(Config(root=tmp_path), UpOptions(token="t0ken", port=8123), print)
    sup.dir.mkdir(parents=True)
    child = sup._dashboard()
    assert "--config" not in child.argv and child.argv[child.argv.index("--port") + 1] == "8123"
    token = Path(child.argv[child.argv.index("--token-file") + 1])
    assert token.read_text() == "t0ken\n" and stat.S_IMODE(token.stat().st_mode) == 0o600
    assert "MAINBOARD_CONFIG" not in child.env


def test_a_stop_that_fails_is_one_line_and_the_others_go_on(tmp_path: Path) -> None:
    said: list[str] = []

    def refuse() -> None:
        raise FlowerError("flower pid 7 did not stop after SIGTERM and SIGKILL")

    _quietly(refuse, said.append, "flower")()
    assert said == ["stopping flower: flower pid 7 did not stop after SIGTERM and SIGKILL"]


def _workspace(tmp_path: Path, broker: str = "") -> Config:
    (tmp_path / "mainboard.toml").write_text(f'[workspace]\nname = "up"\n{broker}')
    return load_config(tmp_path / "mainboard.toml")


def test_ctrl_c_while_starting_stops_what_started_and_exits_quietly(
        tmp_path: Path, redis_server: RedisServer) -> None:
    """A Ctrl-C that came before the first child started: nothing runs, nothing is
    announced, up.json says stopped (an external broker is only checked, never started)."""
    config = _workspace(tmp_path, f'\n[broker]\nurl = "{redis_server.url}"\n')
    announced: list[object] = []
    sup = Supervisor(config, UpOptions(workers=1), print)
    sup.stopping.set()
    sup.run(announced.append)
    state = json.loads(sup.state_path.read_text())
    assert not announced and state["state"] == "stopped" and state["children"] == {}
    assert not (config.state_dir / "flower" / "flower.json").exists()


def test_a_broker_found_running_is_adopted_and_left_running(tmp_path: Path) -> None:
    require("redis-server")
    config = _workspace(tmp_path)
    broker = EmbeddedBroker(config.state_dir)
    pid = broker.up().pid
    try:
        sup = Supervisor(config, UpOptions(workers=0), print)
        sup.stopping.set()  # Ctrl-C right after the broker was looked at
        sup.run(lambda started: None)
        assert json.loads(sup.state_path.read_text())["adopted"] == ["broker"]
        assert broker.status().pid == pid  # not ours to stop
    finally:
        broker.down()
