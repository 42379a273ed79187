"""`mainboard up` for real: the embedded broker, Flower, the dashboard and Celery workers as
processes under one supervisor; a killed worker replaced, a crash loop ending, Ctrl-C
leaving nothing behind. And the dashboard under a base path behind a private nginx,
looked at in headless Chromium."""

from __future__ import annotations

import base64
import json
import os
import queue
import select
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

import mainboard
from mainboard.cli import cli
from mainboard.config import Config
from mainboard.daemon import process_cmdline
from mainboard.services.broker import EmbeddedBroker
from mainboard.services.flower import USER
from mainboard.tasks.app import make_app
from tests.support.chromium import Tab, drive
from tests.support.cliserver import popen_mainboard
from tests.support.integration import spec, subprocess_env, write_workspace
from tests.support.nginx import start_nginx
from tests.support.services import RedisServer, free_port, require

pytestmark = pytest.mark.live

START_S = 120.0  # broker, Flower (seconds of imports), dashboard and workers on 2 loaded cores
# a hang guard: the verb's promise is 10 s from Ctrl-C to exit, a figure
# bench/bench_fail_fast.py prints (`up: Ctrl-C to exit`)
STOP_S = 120.0
RUN_NAME = "proxied-gauss"


@dataclass
class Up:
    """A running `mainboard up --json` in its own process group, its stderr read as it comes."""

    proc: subprocess.Popen[str]
    dir: Path
    started: dict[str, Any]
    errors: queue.Queue[str] = field(default_factory=queue.Queue)
    stderr: list[str] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.dir / ".mainboard"

    def children(self) -> dict[str, Any]:
        return json.loads((self.state / "up" / "up.json").read_text())["children"]

    def worker_pid(self, node: str) -> int | None:
        child = self.children()[f"worker {node}"]
        return child["pid"] if child["running"] else None

    def wait_line(self, text: str, timeout: float = 60.0) -> str:
        """The first stderr line containing ``text`` (from now on)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.errors.get(timeout=left)
            except queue.Empty:
                break
            if text in line:
                return line
        raise AssertionError(f"no stderr line with {text!r}; got: {self.stderr}")


def start_up(directory: Path, *args: str) -> Up:
    """`mainboard up --json ARGS` in ``directory``; returns once it printed its URLs."""
    proc = popen_mainboard(["up", "--json", *args],
                           cwd=directory, env=subprocess_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    up = Up(proc, directory, {})

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            up.stderr.append(line)
            up.errors.put(line)

    threading.Thread(target=read_stderr, daemon=True).start()
    ready, _, _ = select.select([proc.stdout], [], [], START_S)
    line = proc.stdout.readline() if ready else ""  # type: ignore[union-attr]
    if not line:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(STOP_S)
        raise AssertionError(f"`mainboard up` printed no URLs: {''.join(up.stderr)}")
    up.started = json.loads(line)
    return up


def workspace_dir(parent: Path) -> Path:
    """A workspace on the embedded broker (no [broker] url)."""
    parent.mkdir(parents=True, exist_ok=True)
    (parent / "mainboard.toml").write_text('[workspace]\nname = "up-test"\n')
    return parent


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),
                                    timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def answering(app: Any, nodes: set[str], timeout: float = 60.0) -> set[str]:
    """The nodes among ``nodes`` that answer a Celery ping, once all do (or at ``timeout``)."""
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while time.monotonic() < deadline and seen != nodes:
        replies = app.control.ping(timeout=1.0) or []
        seen = {name.split("@")[0] for reply in replies for name in reply} & nodes
    return seen


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                found.append(int(entry.name))
    return found


def recorded_pids(up: Up) -> set[int]:
    """Every pid the supervisor and the daemons' own records name."""
    pids = {c["pid"] for c in up.children().values() if c["pid"]}
    for record in ("broker.json", "flower/flower.json"):
        with_pid = json.loads((up.state / record).read_text()).get("pid")
        if with_pid:
            pids.add(with_pid)
    return pids


def interrupt(up: Up) -> int:
    """Ctrl-C as a terminal sends it (to the foreground group); the exit code."""
    os.killpg(up.proc.pid, signal.SIGINT)
    try:
        return up.proc.wait(STOP_S)
    finally:
        if up.proc.poll() is None:
            os.killpg(up.proc.pid, signal.SIGKILL)


def test_up_serves_everything_replaces_a_killed_worker_and_stops_on_ctrl_c(
        tmp_path: Path) -> None:
    require("redis-server")
    up = start_up(workspace_dir(tmp_path / "ws"), "--workers", "2")
    pids: set[int] = set()
    try:
        started = up.started
        broker = EmbeddedBroker(up.state)
        secrets = [broker.secret_path.read_text().strip(),
                   Path(started["flower_secret_file"]).read_text().strip()]
        with redis.Redis.from_url(broker.url()) as client:
            assert client.ping()
        # the dashboard, with its token as printed
        code, page = get(started["dashboard"])
        assert code == 200 and 'data-page="runs"' in page
        token = started["dashboard"].split("?token=")[1]
        base = started["dashboard"].split("?")[0]
        code, body = get(base + "api/runs", {"Authorization": f"token {token}"})
        assert code == 200 and json.loads(body)["broker"]["ok"] is True
        # Flower, behind its basic auth
        basic = base64.b64encode(f"{USER}:{secrets[1]}".encode()).decode()
        assert get(started["flower"] + "healthcheck", {"Authorization": f"Basic {basic}"})[0] \
            == 200
        assert get(started["flower"] + "workers")[0] == 401
        # a second supervisor of the same workspace is refused, nothing of the first touched
        second = CliRunner().invoke(cli, ["--config", str(up.dir / "mainboard.toml"), "up"])
        assert second.exit_code == 2 and not second.stdout
        assert "another `mainboard up` supervises" in second.stderr
        assert json.loads((up.state / "up" / "up.json").read_text())["state"] == "running"
        # two workers answer on the broker
        nodes = set(started["workers"])
        app = make_app(broker_url=broker.url())
        assert answering(app, nodes) == nodes and len(nodes) == 2
        # one killed: replaced under its node name, one stderr line saying which and why
        victim = sorted(nodes)[0]
        old = up.worker_pid(victim)
        assert old
        os.kill(old, signal.SIGKILL)
        line = up.wait_line(f"worker {victim} died")
        assert "killed by SIGKILL" in line and "restarted it as pid" in line
        new = up.worker_pid(victim)
        assert new and new != old and f"pid {new} " in line
        assert answering(app, {victim}) == {victim}
        app.close()
        # the dashboard killed: back on the same port with the same token, the URL still opens
        dashboard = up.children()["dashboard"]["pid"]
        os.kill(dashboard, signal.SIGKILL)
        assert "killed by SIGKILL" in up.wait_line("dashboard died")
        assert up.children()["dashboard"]["pid"] != dashboard
        code, page = get(started["dashboard"])
        assert code == 200 and 'data-page="runs"' in page
        pids = recorded_pids(up) | {old, dashboard}
    finally:
        code = interrupt(up)
    assert code == 0, "".join(up.stderr)
    assert not group_members(up.proc.pid)
    alive = sorted(p for p in pids if process_cmdline(p))
    assert not alive, f"left running: {[(p, process_cmdline(p)) for p in alive]}"
    assert json.loads((up.state / "up" / "up.json").read_text())["state"] == "stopped"
    shown = json.dumps(started) + "".join(up.stderr)
    assert not any(s in shown for s in secrets), "a password was printed"
    assert "Traceback" not in shown


def test_a_crash_loop_ends_with_one_error_line_and_nothing_left(tmp_path: Path) -> None:
    require("redis-server")
    up = start_up(workspace_dir(tmp_path / "ws"), "--workers", "1", "--max-restarts", "0",
                  "--base-path", "board")
    try:
        assert "/board/?token=" in up.started["dashboard"]  # `board` is the prefix /board/
        code, page = get(up.started["dashboard"])
        assert code == 200 and 'data-base="/board/"' in page
        node = up.started["workers"][0]
        pid = up.worker_pid(node)
        assert pid
        pids = recorded_pids(up)
        os.kill(pid, signal.SIGKILL)
        code = up.proc.wait(60)
    finally:
        if up.proc.poll() is None:
            interrupt(up)
    errors = "".join(up.stderr)
    assert code == 1, errors
    last = up.stderr[-1]
    assert last.startswith(f"mainboard: error: worker {node} died 1 times within 300 s")
    assert "(--max-restarts 0)" in last and "killed by SIGKILL" in last
    assert "Traceback" not in errors
    assert not group_members(up.proc.pid)
    assert not [p for p in pids if process_cmdline(p)]


def test_bad_input_exits_2_with_one_line_and_starts_nothing(tmp_path: Path) -> None:
    ws = workspace_dir(tmp_path / "ws")
    runner = CliRunner()
    for args, named in ((["--base-path", "/a b/"], "--base-path '/a b/'"),
                        (["--base-path", "/board/../x"], "--base-path '/board/../x'"),
                        (["--workers", "-1"], "--workers")):
        result = runner.invoke(cli, ["--config", str(ws / "mainboard.toml"), "up", *args])
        assert result.exit_code == 2, result.output
        assert not result.stdout and result.stderr.count("\n") == 1
        assert named in result.stderr and "Traceback" not in result.stderr
    assert "valid:" in runner.invoke(cli, ["--config", str(ws / "mainboard.toml"), "up",
                                           "--base-path", "/a b/"]).stderr
    assert not (ws / ".mainboard").exists()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = runner.invoke(cli, ["--config", str(ws / "mainboard.toml"), "up", "--port",
                                   str(port)])
    assert busy.exit_code == 2 and not busy.stdout and busy.stderr.count("\n") == 1
    assert f"--port {port}: in use" in busy.stderr
    assert not (ws / ".mainboard" / "redis").exists()


def test_a_broker_that_does_not_answer_is_one_line_naming_it(tmp_path: Path) -> None:
    port = free_port()  # nobody listens there
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mainboard.toml").write_text(
        f'[workspace]\nname = "down"\n\n[broker]\nurl = "redis://u:hunter2@127.0.0.1:{port}/0"\n')
    runner = CliRunner()
    result = runner.invoke(cli, ["--config", str(ws / "mainboard.toml"), "up"])
    assert result.exit_code == 1 and not result.stdout
    assert result.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in result.stderr
    assert "[broker] url" in result.stderr and "hunter2" not in result.stderr
    assert "Traceback" not in result.stderr
    assert not (ws / ".mainboard" / "flower").exists() and not (ws / ".mainboard" / "workers"
                                                                ).exists()
    debug = runner.invoke(cli, ["--debug", "--config", str(ws / "mainboard.toml"), "up"])
    assert debug.exit_code == 1 and "Traceback" in debug.stderr and "hunter2" not in debug.stderr


# ---------------------------------------------------------------- behind a reverse proxy

@pytest.fixture(scope="module")
def proxied_workspace(tmp_path_factory: pytest.TempPathFactory,
                      redis_server: RedisServer) -> tuple[Config, str]:
    """A workspace holding one real finished run (coordinator here, one real worker)."""
    config = write_workspace(tmp_path_factory.mktemp("proxied"), redis_server)
    result = mainboard.integrate(spec(name=RUN_NAME, stop={"max_samples": 40_000}), workers=1,
                                 config=config)
    return config, result.run_id


@pytest.fixture
def dashboard_at_board(proxied_workspace: tuple[Config, str]) -> Iterator[str]:
    """`mainboard dashboard --base-path /board/ --json`: the URL it printed."""
    config = proxied_workspace[0]
    proc = popen_mainboard(["--config", str(config.path),
                            "dashboard", "--base-path", "/board/", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=subprocess_env())
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""  # type: ignore[union-attr]
    try:
        assert line, f"the dashboard printed no URL: {proc.stderr}"
        yield json.loads(line)["url"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)


def test_the_dashboard_under_a_base_path_works_through_nginx(
        tmp_path: Path, proxied_workspace: tuple[Config, str], dashboard_at_board: str) -> None:
    run_id = proxied_workspace[1]
    url = dashboard_at_board
    assert "/board/?token=" in url
    upstream = int(url.split(":")[2].split("/")[0])
    token = url.split("?token=")[1]
    nginx = start_nginx(tmp_path / "nginx", "/board/", upstream)
    front = f"http://127.0.0.1:{nginx.port}/board/"
    try:
        with_token = {"Authorization": f"token {token}"}
        for path in ("fleet", "jobs", "api/fleet", "api/jobs", f"api/run/{run_id}/version",
                     "static/app.css", "static/uPlot.iife.min.js"):
            assert get(front + path, with_token)[0] == 200, path
        assert get(front + "api/runs")[0] == 401  # the token is still needed through the proxy
        assert get(f"http://127.0.0.1:{upstream}/api/runs", with_token)[0] == 404  # only /board/

        async def look(tab: Tab) -> tuple[str, str]:
            runs = await tab.wait_for(RUN_NAME, 30)
            await tab.goto(f"{front}run/{run_id}")  # the cookie set under /board/ carries it
            await tab.wait_until("document.getElementById('run-title') && "
                                 "document.getElementById('run-title').textContent", 30)
            return runs, await tab.wait_for(RUN_NAME, 5)

        runs_dom, run_dom = drive(f"{front}?token={token}", look, timeout=90)
    finally:
        nginx.stop()
    assert f'href="/board/run/{run_id}"' in runs_dom  # the list's link, under the base path
    assert 'id="run-title"' in run_dom and RUN_NAME in run_dom.split('id="run-title"')[1][:400]
    paths = [path for path, _ in nginx.requests()]
    first = paths.index(f"/board/?token={token}")  # the browser's requests start there
    requests = nginx.requests()[first:]
    assert all(path.startswith("/board/") for path in paths), paths
    for wanted in ("/board/api/runs", f"/board/api/run/{run_id}", "/board/static/app.js"):
        assert any(path.startswith(wanted) for path, _ in requests), (wanted, requests)
    # 499: nginx's record of a request the browser gave up on (the list page's pending
    # fetches when the tab navigates to the run page, which a loaded machine makes likely)
    failed = [(path, status) for path, status in requests if status >= 400 and status != 499]
    assert not failed, failed
