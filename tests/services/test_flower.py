"""`mainboard flower` for real: the embedded Redis, a Celery worker subprocess, Flower, and
headless Chromium looking at the page with (and without) the basic-auth password."""

from __future__ import annotations

import json
import os
import random
import secrets
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mainboard.cli import cli
from mainboard.errors import FlowerError
from mainboard.services.broker import EmbeddedBroker
from mainboard.services.flower import USER, Flower
from tests.support.chromium import render
from tests.support.cliserver import run_mainboard
from tests.support.scrape import get
from tests.support.services import require

pytestmark = pytest.mark.live


@dataclass
class Site:
    """A workspace whose Flower and worker are running."""

    dir: Path
    env: dict[str, str]
    status: dict[str, object]
    password: str
    broker_password: str
    worker: str
    worker_proc: subprocess.Popen[bytes]
    outputs: list[str]


def run_cli(site_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real `mainboard` command in ``site_dir``."""
    return run_mainboard(args, cwd=site_dir, env=env, timeout=120)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """`mainboard flower` (which starts the embedded broker) plus one real worker."""
    require("redis-server")
    directory = tmp_path_factory.mktemp("flower-site")
    (directory / "mainboard.toml").write_text('[workspace]\nname = "flower-test"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAINBOARD_", "FLOWER_"))}
    # Set from outside, these would loosen Flower's auth; `mainboard flower` must drop them.
    hostile = {**env, "FLOWER_UNAUTHENTICATED_API": "true", "FLOWER_BASIC_AUTH": "evil:evil"}
    started = run_cli(directory, hostile, "flower", "--json")
    assert started.returncode == 0, started.stderr
    status = json.loads(started.stdout)
    state = directory / ".mainboard"
    broker = EmbeddedBroker(state)
    worker = f"mbflower-{secrets.token_hex(3)}@{socket.gethostname()}"
    with open(directory / "worker.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "mainboard.tasks.app", "worker", "-n", worker,
             "-P", "solo", "--without-mingle", "--without-gossip", "-l", "info"],
            env={**env, "MAINBOARD_BROKER_URL": broker.url()}, cwd=directory, stdout=log,
            stderr=subprocess.STDOUT)
    password = Path(str(status["secret_file"])).read_text().strip()
    broker_password = broker.secret_path.read_text().strip()
    try:
        yield Site(directory, env, status, password, broker_password, worker, proc,
                   [started.stdout, started.stderr])
    finally:
        proc.terminate()
        proc.wait(30)
        Flower(state).down()
        broker.down()


def test_page_lists_the_worker_behind_basic_auth(site: Site,
                                                 tmp_path_factory: pytest.TempPathFactory,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert site.status["url"] == f"http://127.0.0.1:{site.status['port']}/"
    artifacts = tmp_path_factory.mktemp("flower-artifacts")
    shot = artifacts / "flower-workers.png"
    page = render(f"{site.status['url']}workers", auth=(USER, site.password),
                  wait_for=site.worker, screenshot=shot, timeout=45)
    html = page.html
    with capsys.disabled():
        print(f"\nflower screenshot (test artifact): {shot}")
    assert site.worker in html, "the worker never showed up on Flower's workers page"
    assert "Online" in html and page.status == 200
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_without_the_password_everything_is_refused(site: Site) -> None:
    base = str(site.status["url"])
    for path in ("workers", "api/workers", "tasks", "broker"):
        code, headers, body = get(base + path)
        assert code == 401, path
        if not path.startswith("api/"):  # pages ask the browser for credentials; the API does not
            assert headers.get("www-authenticate", "").startswith("Basic"), path
    # The FLOWER_* variables in the starting environment were dropped, not honoured.
    assert get(base + "workers", ("evil", "evil"))[0] == 401
    assert get(base + "api/workers", (USER, site.password + "x"))[0] == 401
    assert get(base + "api/workers", (USER, site.password))[0] == 200
    page = render(base + "workers", wait_for="Access denied", timeout=20)
    assert page.status == 401
    assert "Access denied" in page.html and site.worker not in page.html


def test_metrics_healthcheck_and_api_ask_for_the_password_too(site: Site) -> None:
    """Flower leaves /metrics and /healthcheck open by design (its auth docs list them);
    ours puts them behind the same basic auth as the pages and the API."""
    base = str(site.status["url"])
    for path in ("metrics", "healthcheck", "api/workers"):
        assert get(base + path)[0] == 401, path
        assert get(base + path, (USER, site.password + "x"))[0] == 401, path
        assert get(base + path, ("evil", "evil"))[0] == 401, path
        code, _, body = get(base + path, (USER, site.password))
        assert code == 200, path
        assert site.password not in body and site.broker_password not in body, path
    assert get(base + "healthcheck", (USER, site.password))[2] == "OK"
    assert "flower_events_total" in get(base + "metrics", (USER, site.password))[2]
    assert Flower(site.dir / ".mainboard").answers(int(str(site.status["port"])))


def test_password_is_in_no_process_args_log_or_output(site: Site) -> None:
    secrets_ = [site.password, site.broker_password]
    pid = int(str(site.status["pid"]))
    seen = 0
    for proc_dir in Path("/proc").iterdir():
        if proc_dir.name.isdigit():
            try:
                args = (proc_dir / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            seen += 1
            assert not any(s in args for s in secrets_), f"a password in pid {proc_dir.name}'s args"
    assert seen > 10
    flower_env = (Path(f"/proc/{pid}") / "environ").read_bytes().decode(errors="replace")
    assert site.password not in flower_env and "FLOWER_" not in flower_env
    flower_args = (Path(f"/proc/{pid}") / "cmdline").read_bytes().decode().split("\0")
    assert "flower" in flower_args and any(a.startswith("--conf=") for a in flower_args)
    log = Path(str(site.status["log_file"])).read_text()
    assert "Visit me at http://127.0.0.1" in log  # it is Flower's log, and it is not empty
    worker_log = (site.dir / "worker.log").read_text()
    assert "ready." in worker_log
    for text in [log, worker_log, *site.outputs]:
        assert not any(s in text for s in secrets_)
    for path in (Path(str(site.status["secret_file"])), Flower(site.dir / ".mainboard").conf_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert str(site.status["secret_file"]) in site.outputs[0]  # the output says where it is


def invoke(site: Site, *args: str) -> Result:
    """The same `mainboard` command in this process (quick: no interpreter start-up)."""
    return CliRunner().invoke(cli, ["--config", str(site.dir / "mainboard.toml"), *args])


def test_status_rerun_stop_and_restart(site: Site) -> None:
    shown = invoke(site, "flower", "status", "--json")
    assert json.loads(shown.stdout)["running"] is True
    again = invoke(site, "flower")
    assert again.exit_code == 0 and again.stdout.startswith("flower already running")
    assert site.password not in again.stdout + again.stderr
    for bad in ("70000", "http"):
        refused = invoke(site, "flower", "--port", bad)
        assert refused.exit_code == 2 and "--port" in refused.stderr
    stopped = invoke(site, "flower", "stop", "--json")
    assert json.loads(stopped.stdout)["action"] == "stopped"
    assert not Path(f"/proc/{site.status['pid']}/cmdline").exists() or \
        b"flower" not in Path(f"/proc/{site.status['pid']}/cmdline").read_bytes()
    assert json.loads(invoke(site, "flower", "status", "--json").stdout)["running"] is False
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        clash = invoke(site, "flower", "--port", str(taken))
    assert clash.exit_code == 2
    assert clash.stderr.strip() == (f"mainboard: error: port {taken} on 127.0.0.1 is in use; "
                                    "choose another --port or leave it out to pick a free one")
    restarted = json.loads(invoke(site, "flower", "--json").stdout)
    assert restarted["action"] == "started"
    # The last port is reused unless something held it at the restart (a busy machine's
    # connections take ephemeral ports from the same range): then the reply says so.
    previous = int(str(site.status["port"]))
    assert restarted["port"] == previous or restarted["note"] == (
        f"its last port, {previous}, was in use: started on another"), restarted
    assert Path(str(restarted["secret_file"])).read_text().strip() == site.password
    assert get(str(restarted["url"]) + "api/workers", (USER, site.password))[0] == 200
    # its last port held by another program: a new one, and the reply says why. That port is
    # one the test chose below the machine's ephemeral range, where no other program's
    # connection can take it in between (a free pick, as above, is an ephemeral port).
    assert json.loads(invoke(site, "flower", "stop", "--json").stdout)["action"] == "stopped"
    pinned = json.loads(invoke(site, "flower", "--port", str(fixed := _unused_fixed_port()),
                               "--json").stdout)
    assert pinned["port"] == fixed, pinned
    assert json.loads(invoke(site, "flower", "stop", "--json").stdout)["action"] == "stopped"
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past its TIME_WAITs
        holder.bind(("127.0.0.1", fixed))  # the stop waited for every thread of Flower's exit
        holder.listen()
        moved = json.loads(invoke(site, "flower", "--json").stdout)
    assert moved["action"] == "started" and moved["port"] != fixed
    assert moved["note"] == f"its last port, {fixed}, was in use: started on another"
    assert get(str(moved["url"]) + "api/workers", (USER, site.password))[0] == 200
    site.status.update(moved)  # where the module's other tests find it


def _unused_fixed_port() -> int:
    """A free port below the ephemeral range (which bind(0) and outgoing connections use)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(20000, low), 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port among 200 tried in 20000-{low - 1}")


def test_a_flower_that_dies_is_reported_without_its_secrets(tmp_path: Path) -> None:
    """A start that fails says why, from the log, with every password scrubbed."""
    fake = tmp_path / "python"  # stands in for the interpreter: leaks what it got, then fails
    fake.write_text('#!/bin/sh\ncat "${6#--conf=}"\necho "broker $MAINBOARD_BROKER_URL"\n'
                    'exit 3\n')
    fake.chmod(0o755)
    server = Flower(tmp_path / "state")
    with pytest.raises(FlowerError) as caught:
        server.up("redis://:broker-pw-123@127.0.0.1:1/0", python=str(fake))
    message = str(caught.value)
    password = server.secret_path.read_text().strip()
    assert message.startswith("flower exited with code 3: ")
    assert "basic_auth = ['mainboard:***']" in message and "redis://:***@127.0.0.1:1/0" in message
    assert password not in message and "broker-pw-123" not in message
    assert server.status().running is False


def test_a_stage_task_shows_its_shadow_name_behind_basic_auth(site: Site) -> None:
    """A task sent with a shadow name (as the coordinator sends each stage: run name,
    iteration, batch) is listed under that name by Flower's API, which asks the password.

    Flower learns tasks from the worker's events, and events sent before its receiver is
    listening (the test before this one restarted Flower) are gone: the task is sent
    again until Flower lists it."""
    from mainboard.tasks.app import make_app

    shadow = "integrate.evaluate[run=ridge it=3 b=17]"
    base = f"{site.status['url']}api/tasks"
    assert get(base)[0] == 401
    app = make_app(broker_url=EmbeddedBroker(site.dir / ".mainboard").url())
    names: set[str] = set()
    deadline = time.monotonic() + 60
    try:
        while shadow not in names and time.monotonic() < deadline:
            sent = app.send_task("mainboard.stages.evaluate", args=({"ref": {
                "run": "ridge", "iteration": 2, "batch": 17, "n": 10}},), queue="celery",
                shadow=shadow)
            assert "not defined" in sent.get(timeout=30)["skipped"]  # no such run: skipped
            listen = time.monotonic() + 5
            while shadow not in names and time.monotonic() < listen:
                code, _, body = get(base, (USER, site.password))
                assert code == 200
                names = {t.get("name") for t in json.loads(body).values()}
                time.sleep(0.3)
    finally:
        app.close()
    assert shadow in names, names
