"""A Sentinel-managed broker: mainboard's Redis clients follow a failover, a write waited
for with WAIT survives the master's SIGKILL, and bad [broker] sentinels fail in one line.

Real processes throughout: a master, a replica and three sentinels (redis-server), the
real `mainboard` CLI in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mainboard.config import load_config
from mainboard.config.brokerurl import redis_url_problem
from mainboard.errors import ConfigError, SentinelsDown
from mainboard.redact import redact_text, redact_url
from mainboard.redisclient import (
    kombu_form,
    min_replicas,
    parse_sentinel_url,
    redis_client,
    sentinel_url,
    wait_replicas,
)
from mainboard.services.broker import check_broker
from tests.support.cliserver import run_mainboard
from tests.support.integration import slow_spec, subprocess_env, toml
from tests.support.outage import (
    RUN,
    numbers,
    reference,
    run_id_of,
    sentinel_broker,
    start,
    wait_iteration,
)
from tests.support.sentinels import SentinelSet, start_sentinel_set
from tests.support.services import free_port

pytestmark = pytest.mark.live


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    found = start_sentinel_set(tmp_path / "sentinel")
    yield found
    found.stop()


def _switch_master(found: SentinelSet) -> redis.client.PubSub:
    """A subscription to the sentinels' own failover event, made before the kill."""
    pubsub = redis.Redis(port=found.sentinel_ports[0], socket_timeout=30).pubsub()
    pubsub.subscribe("+switch-master")
    pubsub.get_message(timeout=5)  # the subscribe confirmation
    return pubsub


def test_a_client_follows_a_failover_and_keeps_a_waited_write(sentinel_set: SentinelSet) -> None:
    client = redis_client(sentinel_set.url, socket_timeout=5, socket_connect_timeout=2)
    client.set("mb:counted", "42")
    assert wait_replicas(client, 1, 2000) == 1
    old = sentinel_set.master_port()
    events = _switch_master(sentinel_set)
    killed = time.monotonic()
    sentinel_set.kill(old)
    message = events.get_message(timeout=30)
    while message is not None and message["type"] != "message":
        message = events.get_message(timeout=30)
    assert message is not None, "no +switch-master within 30 s of the master's SIGKILL"
    assert sentinel_set.master_port() != old
    # The same client object, made before the failover, reads and writes on the new master.
    assert client.get("mb:counted") == b"42"
    client.set("mb:after", "1")
    print(f"failover: writes again {time.monotonic() - killed:.1f} s after SIGKILL",
          file=sys.stderr)


def _workspace(tmp_path: Path, sentinels: str) -> Path:
    (tmp_path / "mainboard.toml").write_text(
        f'[workspace]\nname = "sentinel"\n\n[broker]\nsentinels = {sentinels}\n'
        'master = "mbtest"\n')
    (tmp_path / "run.toml").write_text(toml(slow_spec(0.0, name="sentinel")))
    return tmp_path


def _cli(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_mainboard(["--config", str(ws / "mainboard.toml"), *args], cwd=ws,
                         env=subprocess_env(), timeout=120)


def test_a_malformed_sentinel_entry_is_one_line_exit_2(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, '["127.0.0.1:26379", "127.0.0.1:port"]')
    done = _cli(ws, "integrate", "run.toml", "--workers", "2")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "sentinels" in lines[0] and "127.0.0.1:port" in lines[0], lines[0]
    assert "HOST:PORT" in lines[0], lines[0]
    assert not (ws / ".mainboard" / "runs").exists()


def test_sentinels_that_answer_nothing_exit_3_and_start_nothing(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(3)]
    ws = _workspace(tmp_path, "[" + ", ".join(f'"127.0.0.1:{p}"' for p in ports) + "]")
    done = _cli(ws, "integrate", "run.toml", "--workers", "2")
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"127.0.0.1:{ports[0]}" in lines[0] and "mbtest" in lines[0], lines[0]
    assert "start those sentinels" in lines[0], lines[0]
    assert done.stdout == ""
    assert not (ws / ".mainboard" / "runs").exists()


def target_url(ws: Path) -> str:
    return load_config(ws / "mainboard.toml").broker.url or ""


def test_sentinels_and_master_stand_for_the_url(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, '["127.0.0.1:26379", "[::1]:26380"]')
    target = parse_sentinel_url(target_url(ws))
    assert target.sentinels == (("127.0.0.1", 26379), ("::1", 26380))
    assert target.master == "mbtest" and min_replicas(target_url(ws)) == 0
    (ws / "mainboard.toml").write_text((ws / "mainboard.toml").read_text() + "min_replicas = 1\n")
    assert min_replicas(target_url(ws)) == 1
    (ws / "mainboard.toml").write_text('[broker]\nsentinels = ["127.0.0.1:26379"]\n')
    with pytest.raises(ConfigError, match="master is missing"):
        load_config(ws / "mainboard.toml")


def test_a_master_killed_mid_run_fails_over_and_the_run_ends_with_the_undisturbed_numbers(
        tmp_path: Path, sentinel_set: SentinelSet) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mainboard.toml").write_text('[workspace]\nname = "failover"\n\n' + sentinel_broker(
        sentinel_set.entries, sentinel_set.master))
    (ws / "run.toml").write_text(toml(RUN))
    expected = reference(RUN)
    started = time.monotonic()
    proc = start(ws, "integrate", "run.toml", "--workers", "2", "--json")
    try:
        wait_iteration(ws / ".mainboard", run_id_of(RUN), proc)
        killed = time.monotonic()
        sentinel_set.kill(sentinel_set.master_port())
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    ended = time.monotonic()
    assert proc.returncode == 0, err
    got = json.loads(out)
    assert numbers(got) == (expected.estimate, expected.error, 200_000, 5)
    assert "Traceback" not in err
    logs = list((ws / ".mainboard").rglob("*.log"))
    assert logs, "no worker log found"
    for log in logs:  # until the workers' own shutdown after the run (a finished run's
        # workers stop without waiting; a task still in hand then is lost by design)
        text = log.read_text(errors="replace").split("Warm shutdown")[0]
        assert "Traceback" not in text, log
    print(f"failover run: {ended - started:.1f} s in all, {ended - killed:.1f} s after the "
          "master's SIGKILL", file=sys.stderr)


def test_a_sentinel_url_round_trips_with_its_password_and_never_shows_it() -> None:
    url = "sentinel://coordinator:s3cr%23t@127.0.0.1:26379,[::1]:26380/2?master=m&min_replicas=1"
    target = parse_sentinel_url(url)
    assert (target.username, target.password, target.db) == ("coordinator", "s3cr#t", 2)
    assert parse_sentinel_url(sentinel_url(target)) == target
    assert redis_url_problem(url) is None
    assert "s3cr" not in redact_url(url) and "s3cr" not in redact_text(kombu_form(url)[0])
    assert redis_url_problem("sentinel://127.0.0.1:26379/0") is not None  # no master


def test_an_unanswering_sentinel_set_is_one_line_without_the_password(tmp_path: Path) -> None:
    url = f"sentinel://coordinator:s3cret@127.0.0.1:{free_port()}/0?master=m"
    with pytest.raises(SentinelsDown) as caught:
        check_broker(url, timeout=1)
    assert caught.value.exit_code == 3
    assert "s3cret" not in str(caught.value) and "\n" not in str(caught.value)


def _pids(ws: Path) -> list[int]:
    """The pids the local sentinel set recorded, one per node."""
    return [json.loads(p.read_text())["pid"]
            for p in (ws / ".mainboard" / "sentinels").glob("*-*.json")] + \
        [json.loads((ws / ".mainboard" / "sentinels" / "master.json").read_text())["pid"]]


def test_broker_up_replicas_starts_a_set_the_workspace_follows_and_down_stops_it(
        tmp_path: Path) -> None:
    from mainboard.daemon import process_cmdline

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mainboard.toml").write_text('[workspace]\nname = "local-set"\n')
    bad = _cli(ws, "broker", "up", "--replicas", "0")
    assert bad.returncode == 2 and bad.stdout == "", bad.stderr
    (line,) = bad.stderr.splitlines()
    assert "--replicas 0" in line and "valid: an integer >= 1" in line, line
    assert not (ws / ".mainboard" / "sentinels").exists()  # nothing started
    up = _cli(ws, "broker", "up", "--replicas", "2")
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.startswith("[broker]\nsentinels = [") and 'master = "' in up.stdout
        (ws / "mainboard.toml").write_text((ws / "mainboard.toml").read_text() + up.stdout)
        shown = _cli(ws, "broker", "status", "--json")
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)
        assert len(status["replicas"]) == 2 and len(status["sentinels"]) == 3
        assert status["master"]["address"] not in status["replicas"]
        config = load_config(ws / "mainboard.toml")
        assert [e for e in config.broker.sentinels or []] == status["sentinels"]
        client = redis_client(config.broker.url or "", socket_timeout=5)
        client.set("mb:local-set", "1")
        assert wait_replicas(client, 2, 2000) == 2  # both replicas have the write
        client.close()
        again = _cli(ws, "broker", "up", "--replicas", "2", "--json")
        assert json.loads(again.stdout)["action"] == "already running"
        pids = _pids(ws)
        assert len(pids) == 6 and all(process_cmdline(p) for p in pids)
    finally:
        down = _cli(ws, "broker", "down")
    assert down.returncode == 0, down.stderr
    assert not any(process_cmdline(p) for p in pids), "a node of the set outlived broker down"
    assert _cli(ws, "broker", "status").returncode == 3
