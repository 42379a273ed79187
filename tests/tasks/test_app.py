"""The Celery app: hardened settings, URL resolution, and real workers on a real Redis.

Workers are real ``celery -A mainboard.tasks.app worker`` processes (prefork and solo)
loading the tiny tasks of ``tests/support/app_probe_tasks.py``, talking to a password-protected
redis-server on a free loopback port.
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from celery import Celery

from mainboard import keys
from mainboard.errors import ConfigError
from mainboard.tasks import codec
from mainboard.tasks.app import (
    BROKER_URL_ENV,
    DEFAULT_VISIBILITY_TIMEOUT,
    VISIBILITY_TIMEOUT_ENV,
    make_app,
)
from tests.support.pickles import PICKLE, TouchOnUnpickle
from tests.support.services import RedisServer, require, start_redis
from tests.support.waiting import answered

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BROKER_URL_ENV, raising=False)
    monkeypatch.delenv(VISIBILITY_TIMEOUT_ENV, raising=False)
    monkeypatch.delenv("MAINBOARD_CONFIG", raising=False)


# ------------------------------------------------------------------ settings (no broker needed)

URL = "redis://:pw@127.0.0.1:1/0"


def test_hardened_settings_are_on_the_app() -> None:
    conf = make_app(broker_url=URL).conf
    assert conf.task_serializer == conf.result_serializer == codec.SERIALIZER
    assert list(conf.accept_content) == [codec.CONTENT_TYPE]
    assert list(conf.result_accept_content) == [codec.CONTENT_TYPE]
    assert conf.event_serializer == "json"
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    transport = conf.broker_transport_options
    assert transport["visibility_timeout"] == DEFAULT_VISIBILITY_TIMEOUT >= 3600
    assert transport["health_check_interval"] > 0
    assert transport["global_keyprefix"] == keys.CELERY_PREFIX
    assert conf.result_backend_transport_options["global_keyprefix"] == keys.CELERY_PREFIX
    assert conf.result_backend == conf.broker_url == URL
    assert 0 < conf.result_expires <= 7 * 86400
    assert conf.worker_cancel_long_running_tasks_on_connection_loss
    assert conf.broker_connection_retry_on_startup
    assert conf.task_track_started and conf.worker_send_task_events and conf.task_send_sent_event


def test_pickle_is_accepted_nowhere() -> None:
    conf = make_app(broker_url=URL).conf
    for setting in (conf.accept_content, conf.result_accept_content):
        assert not {"pickle", PICKLE, "yaml", "application/x-yaml"} & set(setting)
    assert "pickle" not in {conf.task_serializer, conf.result_serializer, conf.event_serializer}


def test_visibility_timeout_argument_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert make_app(broker_url=URL, visibility_timeout=600).conf.broker_transport_options[
        "visibility_timeout"] == 600
    monkeypatch.setenv(VISIBILITY_TIMEOUT_ENV, "14400")
    assert make_app(broker_url=URL).conf.broker_transport_options["visibility_timeout"] == 14400
    with pytest.raises(ValueError, match="visibility_timeout must be > 0"):
        make_app(broker_url=URL, visibility_timeout=0)


@pytest.mark.parametrize("raw", ["abc", "-5", "0", "inf", "nan", "2h"])
def test_bad_visibility_timeout_in_environment(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(VISIBILITY_TIMEOUT_ENV, raw)
    with pytest.raises(ConfigError, match=f"{VISIBILITY_TIMEOUT_ENV}: must be a positive number"):
        make_app(broker_url=URL)


def test_tls_urls_verify_the_server_by_default() -> None:
    import ssl

    conf = make_app(broker_url="rediss://:pw@redis.example:6380/0").conf
    assert conf.broker_use_ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert conf.redis_backend_use_ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    explicit = make_app(broker_url="rediss://h:6380/0?ssl_cert_reqs=required").conf
    assert not explicit.broker_use_ssl and not explicit.redis_backend_use_ssl


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_non_redis_urls_are_refused_without_leaking_the_password(
        monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    url = "amqp://user:hunter2@rabbit:5672//"
    if where == "environment":
        monkeypatch.setenv(BROKER_URL_ENV, url)
    with pytest.raises(ConfigError, match="not a Redis URL.*redis://") as info:
        make_app(broker_url=url if where == "argument" else None)
    assert "hunter2" not in str(info.value) and where in str(info.value)


# ------------------------------------------------------------------ broker URL resolution


def write_config(directory: Path, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "mainboard.toml"
    path.write_text(body)
    return path


def test_url_precedence_argument_then_environment_then_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer) -> None:
    from mainboard.config import load_config

    config = load_config(write_config(tmp_path, f'[broker]\nurl = "{redis_server.url}"\n'))
    assert make_app(config).conf.broker_url == redis_server.url
    monkeypatch.setenv(BROKER_URL_ENV, "redis://127.0.0.1:2/3")
    assert make_app(config).conf.broker_url == "redis://127.0.0.1:2/3"
    assert make_app(config, broker_url=URL).conf.broker_url == URL
    monkeypatch.delenv(BROKER_URL_ENV)
    monkeypatch.chdir(tmp_path)  # found like git finds a repo when no config is passed
    app = make_app()
    assert app.conf.broker_url == redis_server.url
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1)


def test_embedded_broker_when_the_config_names_none(tmp_path: Path) -> None:
    require("redis-server")
    from mainboard.config import load_config
    from mainboard.services.broker import EmbeddedBroker

    config = load_config(write_config(tmp_path, "[workspace]\nname = 'emb'\n"))
    try:
        app = make_app(config)
        url = app.conf.broker_url
        assert url.startswith("redis://coordinator:") and "@127.0.0.1:" in url  # loopback
        client = redis.Redis.from_url(url)
        assert client.ping()
        client.close()
        assert make_app(config).conf.broker_url == url  # reused, not restarted
    finally:
        EmbeddedBroker(config.state_dir).down()


def test_module_app_is_lazy_and_hardens_the_process(redis_server: RedisServer) -> None:
    """``import`` touches nothing; ``.app`` builds once; pickle then fails even with accept=None."""
    script = """
import os, pickle, sys
import mainboard.tasks.app as m
assert m._app is None, "built at import"
app = m.app
assert app is m.get_app() and app.conf.broker_url == os.environ["MAINBOARD_BROKER_URL"]
from kombu import serialization
try:
    serialization.loads(pickle.dumps(1), "application/x-python-serialize", "binary")
except Exception as exc:
    print(type(exc).__name__)
"""
    env = {**os.environ, BROKER_URL_ENV: redis_server.url}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, text=True,
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ContentDisallowed"


# ------------------------------------------------------------------ real workers


@dataclass
class Worker:
    """A real celery worker subprocess serving one private queue."""

    proc: subprocess.Popen[bytes]
    name: str
    queue: str
    log: Path
    client: Celery
    redis: redis.Redis
    password: str

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def secured_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A password-protected redis-server: the worker log must never show the password."""
    server = start_redis(tmp_path_factory.mktemp("redis-pw"), password=secrets.token_hex(16))
    yield server
    server.stop()


def _wait_ready(worker: Worker, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.proc.poll() is not None:
            raise AssertionError(f"worker exited {worker.proc.returncode}:\n{worker.log_text()}")
        if f"{worker.name} ready." in worker.log_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"worker not ready after {timeout}s:\n{worker.log_text()}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Warm shutdown of the worker's own process group, then SIGKILL if it lingers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture(scope="module", params=["prefork", "solo"])
def worker(request: pytest.FixtureRequest, secured_redis: RedisServer,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    pool = request.param
    tag = uuid.uuid4().hex[:8]
    name, queue = f"probe-{pool}-{tag}@localhost", f"probe-{pool}-{tag}"
    log = tmp_path_factory.mktemp(f"worker-{pool}") / "worker.log"
    env = {**os.environ, BROKER_URL_ENV: secured_redis.url, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "celery", "-A", "mainboard.tasks.app", "worker",
           "-I", "tests.support.app_probe_tasks", f"--pool={pool}", "--concurrency=2", "-n", name,
           "-Q", queue, "--without-mingle", "--without-gossip", "--loglevel=INFO"]
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    client = make_app(broker_url=secured_redis.url)
    handle = Worker(proc, name, queue, log, client, redis.Redis.from_url(secured_redis.url),
                    secured_redis.password or "")
    try:
        _wait_ready(handle)
        yield handle
    finally:
        _stop(proc)
        handle.redis.close()


def call(worker: Worker, task: str, *args: Any, timeout: float = 30) -> Any:
    return worker.client.send_task(task, args=args, queue=worker.queue).get(timeout=timeout)


def test_numpy_round_trip_through_a_worker(worker: Worker) -> None:
    x = np.arange(20, dtype=">f8").reshape(4, 5)[:, ::2]  # big-endian and strided on purpose
    out = call(worker, "probe.scale", x, 2.5)
    assert np.array_equal(out["y"], x * 2.5) and out["y"].dtype == np.float64
    assert out["sum"] == x.sum() and isinstance(out["sum"], np.float64)
    assert out["dtype"] == "<f8" and out["shape"] == [4, 3]
    assert out["contiguous"] and not out["writeable"]


def test_every_supported_type_survives_the_worker(worker: Worker) -> None:
    big = np.random.default_rng(5).standard_normal(200_000)
    value = {"big": big, "c": np.arange(3) * (1 + 1j), "b": np.array([True, False]),
             "f4": np.float32(0.25), "i8": np.int64(-3), "z": 2 - 3j, "n": 2**90,
             "raw": b"\x00\x01", "none": None, "nested": [[1, "two", 3.0]], "empty": np.zeros((0, 4))}
    out = call(worker, "probe.echo", value)
    assert np.array_equal(out["big"], big) and np.array_equal(out["c"], value["c"])
    assert out["f4"].dtype == np.float32 and out["i8"] == -3 and out["z"] == 2 - 3j
    assert out["n"] == 2**90 and out["raw"] == b"\x00\x01" and out["none"] is None
    assert out["nested"] == [[1, "two", 3.0]] and out["empty"].shape == (0, 4)


def test_a_pickled_message_is_refused_logged_and_not_executed(worker: Worker,
                                                               tmp_path: Path) -> None:
    control, marker = tmp_path / "control", tmp_path / "marker"
    pickle.loads(pickle.dumps(TouchOnUnpickle(control)))
    assert control.exists(), "the payload must be live for this test to mean anything"
    task_id = str(uuid.uuid4())
    headers = {"lang": "py", "task": "probe.echo", "id": task_id, "root_id": task_id,
               "parent_id": None, "group": None, "retries": 0, "eta": None, "expires": None,
               "timelimit": [None, None], "argsrepr": "(...)", "kwargsrepr": "{}",
               "origin": "attacker"}
    body = pickle.dumps(((TouchOnUnpickle(marker),), {}, {}))
    with worker.client.connection_for_write() as conn:
        conn.Producer().publish(body, exchange="", routing_key=worker.queue, headers=headers,
                                content_type=PICKLE, content_encoding="binary")
    deadline = time.monotonic() + 30
    while "ContentDisallowed" not in worker.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = worker.log_text()
    assert "ContentDisallowed" in log and "untrusted content of type pickle" in log
    assert worker.proc.poll() is None, "the worker died on a hostile message"
    assert call(worker, "probe.echo", [1, 2]) == [1, 2]  # still serving
    assert not marker.exists()
    assert worker.redis.llen(f"{keys.CELERY_PREFIX}{worker.queue}") == 0  # dropped, not requeued
    assert f"probe.echo[{task_id}] succeeded" not in worker.log_text()


def test_remote_control_speaks_the_codec(worker: Worker) -> None:
    """Ping and inspect (what Flower uses) round-trip through the codec-only accept list."""
    control = worker.client.control
    answered(lambda rest: control.inspect(destination=rest, timeout=5).ping(), [worker.name],
             60, "the worker's first pong")  # its remote-control subscription is in place
    assert control.ping(destination=[worker.name], timeout=5) == [{worker.name: {"ok": "pong"}}]
    inspect = control.inspect(destination=[worker.name], timeout=5)
    assert "probe.scale" in inspect.registered()[worker.name]
    assert inspect.active_queues()[worker.name][0]["name"] == worker.queue
    stats = inspect.stats()[worker.name]
    assert stats["prefetch_count"] <= 2  # prefetch multiplier 1 x concurrency
    conf = inspect.conf()[worker.name]
    assert conf["accept_content"] == [codec.CONTENT_TYPE]
    assert worker.password not in json.dumps(conf, default=str)


def test_task_events_reach_a_monitor(worker: Worker) -> None:
    """Flower's view: the client's task-sent and the worker's lifecycle events, as JSON."""
    wanted = {"task-sent", "task-received", "task-started", "task-succeeded"}
    seen: dict[str, set[str]] = {}
    task_id = ""
    with worker.client.connection_for_read() as conn:
        def on_event(event: dict[str, Any]) -> None:
            seen.setdefault(event.get("uuid", ""), set()).add(event["type"])
            if task_id and wanted <= seen.get(task_id, set()):
                receiver.should_stop = True

        receiver = worker.client.events.Receiver(conn, handlers={"*": on_event})
        # wakeup asks workers for a heartbeat, so the first event proves we are subscribed
        capture = receiver.itercapture(limit=None, timeout=30, wakeup=True)
        try:
            next(capture)
            task_id = worker.client.send_task("probe.echo", args=(1,), queue=worker.queue).id
            for _ in capture:  # ends when on_event sets should_stop; TimeoutError after 30 s
                pass
        finally:
            capture.close()
    assert wanted <= seen.get(task_id, set())


def test_nothing_outside_the_prefix_and_no_password_in_the_log(worker: Worker) -> None:
    call(worker, "probe.echo", "x")
    names = [k.decode() for k in worker.redis.scan_iter(count=1000)]
    assert names and all(name.startswith(keys.PREFIX) for name in names), names
    assert worker.password and worker.password not in worker.log_text()
