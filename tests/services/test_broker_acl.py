"""Least privilege at the embedded broker: ACL users, the default user off, TLS.

Real redis-server, real Celery worker processes. The worker user's rights were found by
running integrations under ``ACL LOG``; these tests keep that log empty, so a new Redis
call a worker makes outside its rights fails here, not on someone's cluster.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from mainboard.integrators.driver import integrate_local
from mainboard.services.acl import COORDINATOR, WORKER
from mainboard.services.broker import EmbeddedBroker
from mainboard.tasks.workers import WORKER_MAIN
from tests.support.brokers import acl_denials, passwords
from tests.support.cliserver import popen_mainboard, run_mainboard
from tests.support.integration import GAUSS_4D, spec, subprocess_env, toml
from tests.support.services import require

pytestmark = [pytest.mark.live, pytest.mark.timeout(180)]
RUN = spec(GAUSS_4D, name="acl", stop={"max_samples": 80_000})


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    require("redis-server", "the embedded broker is a real redis-server")
    embedded = EmbeddedBroker(tmp_path / ".mainboard")
    embedded.up()
    yield embedded
    embedded.down()


def test_a_worker_connection_gets_noperm_on_flushall_config_keys_and_foreign_keys(
        broker: EmbeddedBroker) -> None:
    worker = redis.Redis.from_url(broker.url(user=WORKER))
    assert worker.acl_whoami() == WORKER
    worker.set("mainboard:acl-probe", "1")  # its own prefix: allowed
    for command in (("FLUSHALL",), ("FLUSHDB",), ("CONFIG", "GET", "*"), ("KEYS", "*"),
                    ("ACL", "LIST"), ("SHUTDOWN", "NOSAVE"), ("CLIENT", "LIST"),
                    ("SET", "someone-else", "1"), ("GET", "other:key")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.execute_command(*command)
    with pytest.raises(redis.exceptions.ResponseError):  # off, and not granted either
        worker.execute_command("DEBUG", "SLEEP", "0")
    assert worker.get("mainboard:acl-probe") == b"1"  # nothing was flushed
    admin = redis.Redis.from_url(broker.url())
    assert admin.acl_whoami() == COORDINATOR and admin.config_get("maxmemory-policy")
    worker.close()
    admin.close()


def test_unauthenticated_and_default_user_connections_are_refused(
        broker: EmbeddedBroker) -> None:
    port = broker.status().port
    once = {"port": port, "socket_timeout": 5, "retry": Retry(NoBackoff(), 0)}  # a refusal
    anonymous = redis.Redis(protocol=2, **once)  # is final: redis-py would retry it for ~4 s
    with pytest.raises(redis.exceptions.AuthenticationError):  # NOAUTH
        anonymous.set("mainboard:x", "1")
    with pytest.raises(redis.exceptions.AuthenticationError):  # HELLO without AUTH
        redis.Redis(protocol=3, **once).ping()
    coordinator_password = passwords(broker.state_dir)[0]
    for password in (coordinator_password, "", "nopass"):  # default is off, whatever is tried
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(username="default", password=password or None, **once).ping()
    assert oct((broker.acl_path).stat().st_mode & 0o777) == "0o600"


def test_transactions_in_the_aof_survive_a_restart(broker: EmbeddedBroker) -> None:
    """Redis 7.0 replays the AOF's MULTI blocks as the default user: with its rights cut,
    every transaction (the runs index, results) vanished on restart."""
    with redis.Redis.from_url(broker.url()) as admin:
        pipe = admin.pipeline(transaction=True)
        pipe.zadd("mainboard:runs", {"r1": 1.0}).hset("mainboard:run:r1:state", "status", "x")
        pipe.execute()
    broker.down()  # SHUTDOWN: the AOF is flushed before the server exits, no fsync wait
    broker.up()
    with redis.Redis.from_url(broker.url()) as admin:
        assert admin.zrange("mainboard:runs", 0, -1) == [b"r1"]
        assert admin.hget("mainboard:run:r1:state", "status") == b"x"
    assert acl_denials(broker) == []


@pytest.mark.parametrize("tls", [False, True], ids=["redis", "rediss"])
def test_an_integration_on_the_acl_broker_runs_its_workers_as_the_worker_user(
        tmp_path: Path, tls: bool) -> None:
    """`integrate --workers 2` on the embedded broker: the coordinator as ``coordinator``,
    its local workers as ``worker`` (with TLS: rediss:// only, verified against the CA),
    the exact in-process numbers, nothing refused, no password in any argv or log."""
    require("redis-server", "the embedded broker is a real redis-server")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mainboard.toml").write_text('[workspace]\nname = "acl"\n'
                                       + ("[broker]\ntls = true\n" if tls else ""))
    (ws / "run.toml").write_text(toml(RUN))
    broker = EmbeddedBroker(ws / ".mainboard")
    try:
        proc = popen_mainboard(
            ["--config", str(ws / "mainboard.toml"), "integrate", "run.toml", "--workers", "2",
             "--json"], cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=subprocess_env())
        seen = watch_argv(proc, ws / ".mainboard")
        out, err = proc.communicate(timeout=150)
        assert proc.returncode == 0, err[-2000:]
        got, expected = json.loads(out), integrate_local(RUN)
        assert (got["estimate"], got["error"], got["samples"]) == \
            (expected.estimate, expected.error, 80_000)
        assert acl_denials(broker) == []
        assert broker.url().startswith("rediss://" if tls else "redis://coordinator:")
        logs = "".join(p.read_text() for p in (ws / ".mainboard" / "workers").glob("*.log"))
        assert f"Connected to {'rediss' if tls else 'redis'}://worker:***@" in logs
        secrets = passwords(ws / ".mainboard")
        for text in (out, err, logs, *seen):
            assert not any(s in text for s in secrets)
    finally:
        broker.down()
    if tls:
        conf = (ws / ".mainboard" / "redis" / "redis.conf").read_text()
        assert "\nport 0\n" in conf and "tls-port " in conf  # no plain-text listener


def watch_argv(proc: subprocess.Popen[str], state: Path) -> list[str]:
    """``ps -eo args`` sampled while ``proc`` runs, from the moment its workers exist."""
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        if WORKER_MAIN in listing:
            seen.append(listing)
            if len(seen) >= 3:
                break
        time.sleep(0.3)
    assert seen or (state / "workers").exists()
    return seen


def test_broker_worker_url_and_tls_are_checked_and_never_shown(tmp_path: Path) -> None:
    """``worker_url`` needs ``url``; ``tls`` is for the embedded broker; `config check`
    hides the worker's password as it hides the coordinator's."""
    from mainboard.config import load_config
    from mainboard.errors import ConfigError
    from mainboard.services.broker import worker_url

    path = tmp_path / "mainboard.toml"
    for body, key in (('worker_url = "redis://worker:pw1@h:1/0"', "broker.worker_url"),
                      ('url = "redis://c:pw2@h:1/0"\ntls = true', "broker.tls")):
        path.write_text(f"[broker]\n{body}\n")
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert key in str(info.value) and "pw1" not in str(info.value)
    path.write_text('[broker]\nurl = "redis://c:pw2@h:1/0"\n'
                    'worker_url = "redis://worker:pw3@h:1/0"\n')
    config = load_config(path)
    assert worker_url("redis://c:pw2@h:1/0", config) == "redis://worker:pw3@h:1/0"
    assert worker_url("redis://other:pw@h:1/0", config) == "redis://other:pw@h:1/0"
    done = run_mainboard(["--config", str(tmp_path / "mainboard.toml"), "config", "check",
                          "--json"], cwd=tmp_path, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["broker"]["worker_url"] == "redis://worker:***@h:1/0"
    assert "pw3" not in done.stdout and "pw2" not in done.stdout


def test_a_run_coordinated_inside_a_worker_needs_no_more_than_the_worker_user(
        tmp_path: Path) -> None:
    """The ``mainboard.integrate`` task: a worker (worker user) drives the run itself (lease,
    INFO's run_id, fleet ping, batches) and gets the in-process numbers; nothing refused."""
    require("redis-server", "the embedded broker is a real redis-server")
    from mainboard.tasks import COORDINATOR_QUEUE
    from mainboard.tasks import INTEGRATE_TASK as TASK_NAME
    from mainboard.tasks.app import make_app
    from mainboard.tasks.workers import LocalWorkers

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mainboard.toml").write_text('[workspace]\nname = "acl-task"\n')
    broker = EmbeddedBroker(ws / ".mainboard")
    broker.up()
    env = {"MAINBOARD_CONFIG": str(ws / "mainboard.toml"),
           "PYTHONPATH": subprocess_env()["PYTHONPATH"]}
    pools = [LocalWorkers(1, broker.url(user=WORKER), tmp_path / "logs", queue=queue,
                          prefix=name, env=env).start()
             for name, queue in (("coord", COORDINATOR_QUEUE), ("batch", "mainboard.batches"))]
    app = make_app(broker_url=broker.url())
    try:
        result = app.send_task(TASK_NAME, kwargs={"run": RUN, "workers": 0})
        got, expected = result.get(timeout=150), integrate_local(RUN)
        assert (got["estimate"], got["samples"]) == (expected.estimate, 80_000)
        assert acl_denials(broker) == []
    finally:
        app.close()
        for pool in pools:
            pool.stop()
        broker.down()
