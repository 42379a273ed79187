"""The services' errors as a user meets them, and their small decisions, without a fleet:
a hand-edited broker secret, a redis-server that will not start (or loses its port to
someone else once), a broker that is down, Flower's port, the local sentinel set's edges.
At most one real redis-server per test, started and stopped within it.
"""

from __future__ import annotations

import json
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from mainboard.cli import cli
from mainboard.config import BrokerConfig, Config, load_config
from mainboard.errors import BrokerError
from mainboard.names import lazy
from mainboard.services.acl import WORKER
from mainboard.services.broker import (
    REDIS_SERVER_ENV,
    EmbeddedBroker,
    address,
    check_broker,
    embedded_down,
    worker_url,
)
from mainboard.services.flower import Flower, guard_open_endpoints
from mainboard.services.sentinels import LocalSentinelSet, Node
from mainboard.services.tls import ensure_tls
from tests.support.services import RedisServer, free_port, require


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    """A workspace on the embedded broker; whatever a test started there is stopped."""
    (tmp_path / "mainboard.toml").write_text('[workspace]\nname = "errors"\n')
    yield tmp_path
    EmbeddedBroker(tmp_path / ".mainboard").down()


def mainboard(root: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    """``mainboard --config ROOT/mainboard.toml ARGS`` in this process."""
    return CliRunner().invoke(cli, ["--config", str(root / "mainboard.toml"), *args], env=env)


def one_line(result: Result, code: int) -> str:
    """The single stderr line of a verb that failed with ``code`` (nothing on stdout)."""
    assert result.exit_code == code, result.output
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


def fake_server(folder: Path, body: str) -> Path:
    """An executable ``redis-server`` stand-in: a shell script with ``body``."""
    script = folder / "redis-server"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


# ----- the embedded broker -----------------------------------------------------------------

def test_a_broker_secret_with_a_space_is_one_line_naming_the_file_exit_2(workspace: Path
                                                                         ) -> None:
    require("redis-server")
    state = workspace / ".mainboard"
    state.mkdir()
    secret = state / "broker.secret"
    secret.write_text("hunter2 hunter3\n")
    line = one_line(mainboard(workspace, "broker", "up"), 2)
    assert str(secret) in line and "whitespace" in line and "hunter2" not in line
    assert not EmbeddedBroker(state).status().running
    secret.unlink()  # as the message says: a new one is made
    (state / "broker-worker.secret").write_text("two\twords\n")
    line = one_line(mainboard(workspace, "broker", "up"), 2)
    assert str(state / "broker-worker.secret") in line and "words" not in line


def test_a_redis_server_that_exits_at_once_is_one_line_with_its_log(workspace: Path) -> None:
    binary = fake_server(workspace, 'echo "FATAL CONFIG FILE ERROR (Redis 9.9)"\nexit 1\n')
    line = one_line(mainboard(workspace, "broker", "up", env={REDIS_SERVER_ENV: str(binary)}),
                    1)
    assert "redis-server exited with code 1" in line and "FATAL CONFIG FILE ERROR" in line
    assert "redis.log" in line


def test_a_port_taken_before_redis_binds_it_is_replaced_by_a_fresh_one(workspace: Path
                                                                       ) -> None:
    """The race `up` rides out: the port was free when checked, in use when redis-server
    bound it (here a wrapper says so once, then runs the real server)."""
    real = require("redis-server")
    once = workspace / "lost-the-port"
    binary = fake_server(workspace, f'if [ ! -e "{once}" ]; then touch "{once}"\n'
                                    'echo "Could not create server TCP listening socket: bind: '
                                    'Address already in use"; exit 1; fi\n'
                                    f'exec "{real}" "$@"\n')
    broker = EmbeddedBroker(workspace / ".mainboard")
    broker.up()
    first = broker.down().port
    assert first is not None
    done = mainboard(workspace, "broker", "up", "--json", env={REDIS_SERVER_ENV: str(binary)})
    assert done.exit_code == 0, done.output
    started = json.loads(done.stdout)
    assert once.exists() and started["action"] == "started" and started["port"] != first
    with redis.Redis.from_url(broker.url()) as client:
        assert client.ping()


def test_tls_asked_of_a_broker_running_without_it_is_refused_in_one_line(workspace: Path
                                                                         ) -> None:
    require("redis-server")
    state = workspace / ".mainboard"
    port = EmbeddedBroker(state).up().port
    with pytest.raises(BrokerError) as caught:
        EmbeddedBroker(state, tls=True).up()
    message = str(caught.value)
    assert "\n" not in message and "runs without TLS" in message
    assert "[broker] tls = true" in message and "mainboard broker down" in message
    assert EmbeddedBroker(state).status().port == port  # left as it was
    # stopped: the URL it had is told as "the embedded broker", with how to restart it
    url = EmbeddedBroker(state).url()
    EmbeddedBroker(state).down()
    config = load_config(workspace / "mainboard.toml")
    with pytest.raises(BrokerError) as down:
        check_broker(url, config, timeout=2)
    said = str(down.value)
    assert f"127.0.0.1:{port} (the embedded broker) does not answer" in said
    assert "mainboard broker up" in said and "redis.log" in said
    assert EmbeddedBroker(state).secret_path.read_text().strip() not in said
    assert f"127.0.0.1:{port} (the embedded broker) is not running while the fleet has " \
        "2 workers" in str(embedded_down(state, 2))


def test_a_broker_never_started_has_no_url_and_workers_get_the_url_given(workspace: Path
                                                                         ) -> None:
    state = workspace / ".mainboard"
    with pytest.raises(BrokerError, match="has never been started; run `mainboard broker up`"):
        EmbeddedBroker(state).url()
    config = load_config(workspace / "mainboard.toml")
    given = f"redis://127.0.0.1:{free_port()}/0"
    assert worker_url(given, config) == given == worker_url(given)
    with pytest.raises(BrokerError) as caught:
        check_broker(given, config, timeout=2)
    assert "(broker_url) does not answer" in str(caught.value)
    assert ":? (the embedded broker)" in str(embedded_down(state, 1)) and "1 worker on it" in str(embedded_down(state, 1))


def test_a_worker_url_beside_the_broker_url_is_what_workers_get(tmp_path: Path) -> None:
    config = Config(root=tmp_path, broker=BrokerConfig(url="redis://c:pw@h:1/0",
                                                       worker_url="redis://w:pw@h:1/0"))
    assert worker_url("redis://c:pw@h:1/0", config) == "redis://w:pw@h:1/0"
    assert worker_url("redis://other:pw@h:1/0", config) == "redis://other:pw@h:1/0"


def test_the_embedded_broker_gives_workers_their_own_user(workspace: Path) -> None:
    require("redis-server")
    broker = EmbeddedBroker(workspace / ".mainboard")
    broker.up()
    config = load_config(workspace / "mainboard.toml")
    worker = worker_url(broker.url(), config)
    assert worker == broker.url(user=WORKER) and f"//{WORKER}:" in worker
    other = f"redis://127.0.0.1:{free_port()}/0"  # not this broker's: passed on as it is
    assert worker_url(other, config) == other


@pytest.mark.parametrize(("url", "shown"), [
    ("sentinel://10.0.0.1:26379,10.0.0.2:26379/0?master=m",
     "master m of sentinels 10.0.0.1:26379,10.0.0.2:26379"),
    ("sentinel://nowhere:port/0", "the configured sentinels"),
    ("redis://u:pw@h:70000/0", "the configured broker"),
    ("redis://u:pw@h/0", "h:6379"),
])
def test_a_broker_is_named_by_its_address_never_its_password(url: str, shown: str) -> None:
    assert address(url) == shown


# ----- TLS material ---------------------------------------------------------------------

def test_tls_files_are_kept_while_fresh_and_remade_when_unreadable(tmp_path: Path) -> None:
    files = ensure_tls(tmp_path / "tls")
    cert = files.cert.read_bytes()
    assert ensure_tls(tmp_path / "tls").cert.read_bytes() == cert  # fresh: kept
    files.cert.write_text("not a certificate\n")
    remade = ensure_tls(tmp_path / "tls")
    assert remade.cert.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    assert remade.cert.read_bytes() != cert
    assert stat.S_IMODE(remade.key.stat().st_mode) == 0o600


# ----- Flower ---------------------------------------------------------------------------

def test_flower_on_a_busy_port_is_one_line_exit_2_and_starts_nothing(
        tmp_path: Path, redis_server: RedisServer) -> None:
    (tmp_path / "mainboard.toml").write_text(
        f'[workspace]\nname = "fl"\n\n[broker]\nurl = "{redis_server.url}"\n')
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(mainboard(tmp_path, "flower", "--port", str(port)), 2)
        assert Flower(tmp_path / ".mainboard")._port(None, port)[0] != port  # taken: a fresh one
    assert f"port {port} on 127.0.0.1 is in use" in line and "--port" in line
    flower = Flower(tmp_path / ".mainboard")
    assert flower.running_pid() is None
    stopped = mainboard(tmp_path, "flower", "status", "--json")
    assert stopped.exit_code == 3 and json.loads(stopped.stdout)["state"] == "stopped"
    # before any start there is no password to send, and nobody answers
    assert not Flower(tmp_path / "elsewhere").answers(free_port(), timeout=0.5)
    again = free_port()
    assert flower._port(None, again) == (again, None)  # the last port, while it is free
    assert flower._port(again, None) == (again, None)  # the port asked for, while it is free


def test_flowers_open_endpoints_are_guarded_once(tmp_path: Path) -> None:
    """Flower runs its config file once, but guarding twice must not wrap the handlers
    twice (a second wrap would ask for credentials in a loop of redirects)."""
    monitor = lazy("flower.monitor")
    guard_open_endpoints()
    first = monitor.Metrics.get
    guard_open_endpoints()
    assert monitor.Metrics.get is first and first.mainboard_guarded


# ----- the local sentinel set -----------------------------------------------------------

def test_a_sentinel_set_that_never_ran_or_whose_nodes_are_gone(tmp_path: Path,
                                                                redis_server: RedisServer
                                                                ) -> None:
    local = LocalSentinelSet(tmp_path / ".mainboard")
    assert local.down().action == "not running" and not local.recorded()
    assert local.status().note is None
    local.root.mkdir(parents=True)
    local.record_path.write_text(json.dumps({"nodes": ["master", "sentinel-1"]}))
    Node(local.state_dir, "sentinel-1")._record(pid=None, port=free_port())
    shown = local.status()
    assert not shown.running and shown.note == "no sentinel of the set answers"
    assert shown.sentinels and shown.sentinels[0].startswith("127.0.0.1:")
    assert local.down().action == "stopped" and not local.recorded()
    # not settled: a master without its replica, or nothing answering at all
    assert not LocalSentinelSet._ready(redis_server.port, [], 1)
    assert not LocalSentinelSet._ready(free_port(), [], 1)


def test_a_sentinel_set_whose_server_will_not_start_leaves_nothing(tmp_path: Path) -> None:
    binary = fake_server(tmp_path, 'echo "Bad directive or wrong number of arguments"\n'
                                   "exit 1\n")
    local = LocalSentinelSet(tmp_path / ".mainboard")
    with pytest.raises(BrokerError) as caught:
        local.up(1, str(binary))
    assert "\n" not in str(caught.value) and "Bad directive" in str(caught.value)
    assert not local.recorded() and not local.status().running
