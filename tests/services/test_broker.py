"""The embedded broker against a real redis-server: lifecycle, secrecy, durability, errors.

Every test uses its own state dir under tmp_path and a free port (never 6379).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from mainboard.errors import ConfigError, MissingDependency
from mainboard.services.broker import (
    REDIS_SERVER_ENV,
    EmbeddedBroker,
    find_redis_server,
    redact_url,
    resolve_broker_url,
)
from tests.support.cliserver import run_mainboard
from tests.support.services import free_port, require, wait_port

REPO = Path(__file__).resolve().parents[2]
MAINBOARD = Path(sys.executable).parent / "mainboard"  # the venv running the tests
HOSTILE = "we ird'; echo pwned \"x\" $(id)"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """An embedded broker in a tmp state dir, always stopped afterwards."""
    require("redis-server")
    embedded = EmbeddedBroker(tmp_path / ".mainboard")
    yield embedded
    embedded.down()


def _secret(broker: EmbeddedBroker) -> str:
    return broker.secret_path.read_text().strip()


def _wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def _client(port: int | None, password: str | None) -> redis.Redis:
    """A client that does not retry a refused AUTH (redis-py retries with backoff by default)."""
    return redis.Redis(port=port or 0, password=password, retry=Retry(NoBackoff(), 0))


def _alive(pid: int) -> bool:
    """True if pid runs and is not a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return fields[0] != "Z"


# ----- Python API -------------------------------------------------------------------------

def test_up_status_down_round_trip(broker: EmbeddedBroker) -> None:
    started = broker.up()
    assert started.running and started.action == "started"
    assert started.port and started.port != 6379 and started.pid
    assert started.aof_enabled is True and started.keys == 0
    assert started.url == f"redis://coordinator:***@127.0.0.1:{started.port}/0" \
        == broker.display_url
    with redis.Redis.from_url(broker.url()) as client:
        assert client.ping()
        client.set("k", "v")
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        assert client.config_get("bind") == {"bind": "127.0.0.1"}
        assert client.config_get("protected-mode") == {"protected-mode": "yes"}
    now = broker.status()
    assert (now.running, now.pid, now.port, now.keys) == (True, started.pid, started.port, 1)
    assert now.memory_used_bytes and now.memory_used_bytes > 0 and now.uptime_s is not None
    stopped = broker.down()
    assert (stopped.running, stopped.action, stopped.pid) == (False, "stopped", started.pid)
    assert _wait_until(lambda: not _alive(started.pid))
    after = broker.status()
    assert not after.running and after.state == "stopped" and after.pid is None
    assert broker.down().action == "not running"


def test_up_twice_reuses_the_running_server(broker: EmbeddedBroker) -> None:
    first = broker.up()
    again = EmbeddedBroker(broker.state_dir).up()
    assert again.action == "already running"
    assert (again.pid, again.port) == (first.pid, first.port)


def test_password_never_in_ps_output_logs_or_state(broker: EmbeddedBroker) -> None:
    status = broker.up()
    password = _secret(broker)
    assert len(password) >= 32
    with _client(status.port, "wrong") as bad, pytest.raises(redis.AuthenticationError):
        bad.ping()
    ps_binary = require("ps", "apt-get install procps")
    ps = subprocess.run([ps_binary, "-eww", "-o", "args"], capture_output=True, text=True,
                        check=True).stdout
    assert str(broker.conf_path) in ps and password not in ps
    assert password not in broker.state_path.read_text()
    assert password not in broker.log_path.read_text()
    assert password not in repr(status) and password not in json.dumps(status.to_dict())
    assert password not in broker.display_url and password in broker.url()
    worker_password = broker.worker_secret_path.read_text().strip()
    assert worker_password not in ps and worker_password not in broker.log_path.read_text()
    for secret_file in (broker.secret_path, broker.conf_path, broker.acl_path,
                        broker.worker_secret_path):
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(broker.redis_dir.stat().st_mode) == 0o700


def test_wrong_or_missing_password_is_refused(broker: EmbeddedBroker) -> None:
    port = broker.up().port
    for password in ("wrong", None):
        with _client(port, password) as client:
            with pytest.raises((redis.AuthenticationError, redis.ResponseError)):
                client.set("x", "1")
    with redis.Redis.from_url(broker.url()) as client:
        assert client.get("x") is None


def test_aof_written_and_data_survives_down_up(broker: EmbeddedBroker) -> None:
    port = broker.up().port
    with redis.Redis.from_url(broker.url()) as client:
        client.set("survivor", "still here")
    aof_dir = broker.redis_dir / "appendonlydir"
    assert _wait_until(lambda: any(
        f.stat().st_size > 0 and b"survivor" in f.read_bytes() for f in aof_dir.glob("*.aof")))
    broker.down()
    restarted = broker.up()
    assert restarted.port == port and restarted.keys == 1  # previous port reused while free
    with redis.Redis.from_url(broker.url()) as client:
        assert client.get("survivor") == b"still here"


def test_busy_previous_port_is_replaced(broker: EmbeddedBroker) -> None:
    port = broker.up().port
    broker.down()
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # old one may TIME_WAIT
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        moved = broker.up()
    assert moved.running and moved.port not in (port, 6379)


def test_lost_broker_json_is_recovered_from_pidfile_and_conf(broker: EmbeddedBroker) -> None:
    first = broker.up()
    broker.state_path.unlink()
    again = broker.up()  # must not start a second server on the same data dir
    assert (again.action, again.pid, again.port) == ("already running", first.pid, first.port)


def test_stale_pid_of_killed_server(broker: EmbeddedBroker) -> None:
    first = broker.up()
    os.kill(first.pid, signal.SIGKILL)
    assert _wait_until(lambda: not _alive(first.pid))
    stale = broker.status()
    assert not stale.running and f"stale pid {first.pid}" in (stale.note or "")
    second = broker.up()
    assert second.running and second.pid != first.pid and "stale" in (second.note or "")


def test_recorded_pid_of_a_stranger_is_never_signalled(broker: EmbeddedBroker,
                                                       tmp_path: Path) -> None:
    broker.up()
    broker.down()
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        broker.state_path.write_text(json.dumps({"pid": stranger.pid, "port": free_port()}))
        assert not broker.status().running
        assert broker.down().action == "not running"
        assert stranger.poll() is None  # still alive: not our redis-server
        assert broker.up().action == "started"
    finally:
        stranger.kill()
        stranger.wait()


def test_down_falls_back_to_sigterm_when_secret_is_lost(broker: EmbeddedBroker) -> None:
    first = broker.up()
    broker.secret_path.write_text("not-the-password\n")  # SHUTDOWN will be refused
    confused = broker.status()
    assert confused.running and "AuthenticationError" in (confused.note or "")
    assert broker.down().action == "stopped"
    assert _wait_until(lambda: not _alive(first.pid))
    assert "Received SIGTERM" in broker.log_path.read_text()
    broker.secret_path.unlink()
    assert broker.up().action == "started" and broker.status().keys == 0


def test_hostile_state_dir_path(tmp_path: Path) -> None:
    require("redis-server")
    embedded = EmbeddedBroker(tmp_path / HOSTILE / ".mainboard")
    try:
        status = embedded.up()
        assert status.running and Path(status.state_dir).name == ".mainboard"
        assert (tmp_path / HOSTILE / ".mainboard" / "redis" / "redis.log").exists()
    finally:
        embedded.down()
    assert not list(tmp_path.glob("pwned*"))


def test_missing_binary_says_what_to_install(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(REDIS_SERVER_ENV, raising=False)
    with pytest.raises(MissingDependency) as caught:
        EmbeddedBroker(tmp_path / ".mainboard").up()
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 2
    for hint in ("apt-get install redis-server", "brew install redis",
                 "conda install -c conda-forge redis", '[broker] url = "redis://'):
        assert hint in message
    monkeypatch.setenv(REDIS_SERVER_ENV, str(tmp_path / "nope"))
    with pytest.raises(MissingDependency, match=REDIS_SERVER_ENV):
        find_redis_server()


def test_override_env_var_finds_binary_off_path(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    binary = require("redis-server")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(REDIS_SERVER_ENV, binary)
    embedded = EmbeddedBroker(tmp_path / ".mainboard")
    try:
        assert embedded.up().running
    finally:
        embedded.down()


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:s3cret@h:1/0", "redis://:***@h:1/0"),
    ("rediss://user:s3cret@h:6380/2", "rediss://user:***@h:6380/2"),
    ("redis://h:1/0", "redis://h:1/0"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (59, "59s"), (187, "3m07s"), (5 * 3600 + 120, "5h02m"), (76 * 3600, "3d4h")])
def test_uptime_is_short(seconds: int, shown: str) -> None:
    from mainboard.cli.broker import _duration

    assert _duration(seconds) == shown


# ----- config glue ----------------------------------------------------------------------------

def _config(tmp_path: Path, body: str):  # type: ignore[no-untyped-def]
    from mainboard.config import load_config

    path = tmp_path / "mainboard.toml"
    path.write_text(body)
    return load_config(path)


def test_resolve_uses_configured_url(tmp_path: Path) -> None:
    url = "rediss://:s3cret@broker.example:6380/1"
    config = _config(tmp_path, f'[workspace]\n[broker]\nurl = "{url}"\n')
    assert resolve_broker_url(config) == url
    assert not (tmp_path / ".mainboard" / "broker.json").exists()  # nothing started


def test_resolve_rejects_other_schemes(tmp_path: Path) -> None:
    """mainboard.toml refuses a non-Redis url; a Config built in code is refused again."""
    with pytest.raises(ConfigError, match=r"broker\.url.*redis://") as loading:
        _config(tmp_path, '[workspace]\n[broker]\nurl = "amqp://:pw@h:5672//"\n')
    assert ":pw@" not in str(loading.value) and "amqp://:***@h:5672//" in str(loading.value)
    from mainboard.config import BrokerConfig, Config

    built = Config(root=tmp_path, broker=BrokerConfig.model_construct(url="amqp://:pw@h:5672//"))
    with pytest.raises(ConfigError, match=r"broker\.url.*redis://") as caught:
        resolve_broker_url(built)
    assert ":pw@" not in str(caught.value)
    assert not (tmp_path / ".mainboard").exists()  # refused before anything started


def test_resolve_starts_embedded_when_no_url(tmp_path: Path) -> None:
    require("redis-server")
    config = _config(tmp_path, "[workspace]\n")
    try:
        url = resolve_broker_url(config)
        assert url == resolve_broker_url(config)  # second call reuses
        with redis.Redis.from_url(url) as client:
            assert client.ping()
    finally:
        EmbeddedBroker(config.state_dir).down()


# ----- CLI -----------------------------------------------------------------------------------

def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_mainboard(["broker", *args], cwd=cwd, env=env, timeout=60)


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A tmp workspace with a minimal mainboard.toml, found via MAINBOARD_CONFIG."""
    require("redis-server")
    (tmp_path / "mainboard.toml").write_text("[workspace]\n")
    env = {**os.environ, "MAINBOARD_CONFIG": str(tmp_path / "mainboard.toml")}
    env.pop(REDIS_SERVER_ENV, None)
    yield tmp_path, env
    EmbeddedBroker(tmp_path / ".mainboard").down()


def test_cli_round_trip(workspace: tuple[Path, dict[str, str]]) -> None:
    root, env = workspace
    elsewhere = root / "sub"
    elsewhere.mkdir()
    up = _cli("up", "--json", cwd=elsewhere, env=env)
    assert up.returncode == 0, up.stderr
    started = json.loads(up.stdout)
    assert started["state"] == "running" and started["action"] == "started"
    assert started["state_dir"] == str(root / ".mainboard")
    pid, port = started["pid"], started["port"]
    assert _alive(pid) and os.getsid(pid) != os.getsid(0)  # detached, outlives the CLI
    outputs = [up]
    again = _cli("up", cwd=root, env=env)
    assert again.returncode == 0 and "already running" in again.stdout and str(port) in again.stdout
    status = _cli("status", "--json", cwd=root, env=env)
    assert json.loads(status.stdout)["pid"] == pid and json.loads(status.stdout)["aof_enabled"]
    human = _cli("status", cwd=root, env=env)
    assert human.returncode == 0 and "running" in human.stdout and "***" in human.stdout
    down = _cli("down", "--json", cwd=root, env=env)
    assert json.loads(down.stdout)["action"] == "stopped"
    assert _wait_until(lambda: not _alive(pid))
    stopped = _cli("status", "--json", cwd=root, env=env)
    assert stopped.returncode == 3 and json.loads(stopped.stdout)["state"] == "stopped"
    outputs += [again, status, human, down, stopped, _cli("status", cwd=root, env=env)]
    assert "mainboard broker up" in outputs[-1].stdout
    password = (root / ".mainboard" / "broker.secret").read_text().strip()
    for done in outputs:
        assert done.stderr == "" and password not in done.stdout
        assert len(done.stdout.strip().splitlines()) == 1


def test_cli_without_mainboard_toml_uses_cwd(tmp_path: Path) -> None:
    require("redis-server")
    env = {k: v for k, v in os.environ.items() if k not in ("MAINBOARD_CONFIG", REDIS_SERVER_ENV)}
    try:
        up = _cli("up", "--json", cwd=tmp_path, env=env)
        assert up.returncode == 0, up.stderr
        assert json.loads(up.stdout)["state_dir"] == str(tmp_path / ".mainboard")
    finally:
        EmbeddedBroker(tmp_path / ".mainboard").down()


def test_cli_concurrent_up_starts_one_server(workspace: tuple[Path, dict[str, str]]) -> None:
    root, env = workspace
    procs = [subprocess.Popen([str(MAINBOARD), "broker", "up", "--json"], cwd=root, env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    results = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert len({r["pid"] for r in results}) == 1
    assert sorted(r["action"] for r in results) == ["already running", "started"]


def test_cli_missing_binary_one_line_exit_2(workspace: tuple[Path, dict[str, str]]) -> None:
    root, env = workspace
    done = _cli("up", cwd=root, env={**env, "PATH": str(root)})
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install redis-server" in lines[0]
    assert lines[0].startswith("mainboard: error: redis-server not found on PATH")


# ----- deploy/redis.conf ------------------------------------------------------------------------

def test_deploy_redis_conf_is_valid_and_hardened(tmp_path: Path) -> None:
    binary = require("redis-server")
    port = free_port()
    proc = subprocess.Popen(
        [binary, str(REPO / "deploy" / "redis.conf"), "--port", str(port), "--dir", str(tmp_path),
         "--pidfile", str(tmp_path / "r.pid"), "--logfile", str(tmp_path / "r.log"),
         "--supervised", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port("127.0.0.1", port)
        with redis.Redis(port=port) as client:
            config = client.config_get("*")
        assert config["bind"].split()[0] == "127.0.0.1"
        expected = {"protected-mode": "yes", "appendonly": "yes", "appendfsync": "everysec",
                    "maxmemory-policy": "noeviction", "enable-debug-command": "no"}
        assert {k: config[k] for k in expected} == expected
    finally:
        proc.terminate()
        proc.wait(10)
    text = (REPO / "deploy" / "redis.conf").read_text()
    for hint in ("# requirepass", '# rename-command FLUSHALL ""', '# rename-command CONFIG ""',
                 '# rename-command DEBUG ""'):
        assert hint in text
