"""The worker commands we ship (compose.yaml, systemd units) run as written, without ``-I``.

Each command line is read from its file and started for real (the systemd specifiers and
the venv path substituted) against a password-protected redis-server. The workers must
know every mainboard task although nobody passed ``-I``, serve exactly their queue, take
stage tasks and ``mainboard.tasks.integrate`` by the app's routes, and refuse a pickled
message on the real batch queue: logged, not executed, not requeued, worker still serving.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from celery import Celery

from mainboard import keys
from mainboard.tasks import BATCH_QUEUE, COORDINATOR_QUEUE, STAGE_PREFIX, STAGE_TASKS
from mainboard.tasks.app import BROKER_URL_ENV, TASK_ROUTES, make_app
from mainboard.tasks.integrate import TASK_NAME
from tests.services import RedisServer, start_redis
from tests.test_app import PICKLE, _TouchOnUnpickle

pytestmark = pytest.mark.live
REPO = Path(__file__).resolve().parent.parent
UNITS = REPO / "deploy" / "systemd"
TASKS = {STAGE_PREFIX + name for name in STAGE_TASKS} | {TASK_NAME}


def compose_command(service: str) -> list[str]:
    """The ``command:`` list of one compose.yaml service (a JSON-style flow sequence)."""
    text = (REPO / "compose.yaml").read_text()
    block = re.search(rf"^  {re.escape(service)}:\n((?:    .*\n|\s*#.*\n)+)", text, re.M)
    assert block, f"compose.yaml has no service {service!r}"
    command = re.search(r"command: (\[.*?\])", block.group(1), re.S)
    assert command, f"compose service {service!r} has no command"
    return json.loads(command.group(1))


def unit_command(unit: str, instance: str) -> list[str]:
    """A unit's ExecStart with ``%i`` and ``%%H`` expanded as systemd would."""
    line = next(x for x in (UNITS / unit).read_text().splitlines() if x.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart=").replace("%%H", "%h")
                       .replace("%i", instance))


def runnable(command: list[str], node: str | None = None) -> list[str]:
    """A shipped ``celery ...`` command as this venv runs it; ``node`` names it if it does not."""
    assert Path(command[0]).name == "celery", command
    assert "-I" not in command and not any(c.startswith("--include") for c in command)
    out = [sys.executable, "-m", "celery", *command[1:], "--without-mingle", "--without-gossip"]
    return out + ["-n", node] if node else out


@dataclass
class Deployed:
    """One shipped worker command running for real."""

    name: str
    queue: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis-deploy"), password=secrets.token_hex(16))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def deployed(broker: RedisServer, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[str, Deployed]]:
    tag = uuid.uuid4().hex[:6]
    host = os.uname().nodename
    commands = {
        "compose worker": (runnable(compose_command("worker"), f"cw-{tag}@%h"),
                           f"cw-{tag}@{host}", BATCH_QUEUE),
        "compose coordinator": (runnable(compose_command("coordinator"), f"cc-{tag}@%h"),
                                f"cc-{tag}@{host}", COORDINATOR_QUEUE),
        "unit worker": (runnable(unit_command("mainboard-worker@.service", tag)),
                        f"batch-{tag}@{host}", BATCH_QUEUE),
        "unit coordinator": (runnable(unit_command("mainboard-coordinator.service", tag)
                                      ) + ["-n", f"coordinator-{tag}@%h"],
                             f"coordinator-{tag}@{host}", COORDINATOR_QUEUE),
    }
    logs = tmp_path_factory.mktemp("deployed")
    env = {**os.environ, BROKER_URL_ENV: broker.url, "PYTHONPATH": str(REPO)}
    env.pop("MAINBOARD_CONFIG", None)
    running: dict[str, Deployed] = {}
    try:
        for label, (command, name, queue) in commands.items():
            log = logs / f"{label.replace(' ', '-')}.log"
            with log.open("wb") as sink:
                proc = subprocess.Popen(command, cwd=logs, env=env, stdout=sink,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            running[label] = Deployed(name, queue, proc, log)
        deadline = time.monotonic() + 90
        for label, worker in running.items():
            while f"{worker.name} ready." not in worker.text():
                assert worker.proc.poll() is None, f"{label} exited:\n{worker.text()[-3000:]}"
                assert time.monotonic() < deadline, f"{label} not ready:\n{worker.text()[-3000:]}"
                time.sleep(0.1)
        yield running
    finally:
        for worker in running.values():
            if worker.proc.poll() is None:
                os.killpg(worker.proc.pid, signal.SIGTERM)
        for worker in running.values():
            try:
                worker.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.proc.pid, signal.SIGKILL)
                worker.proc.wait(5)


@pytest.fixture(scope="module")
def client(broker: RedisServer) -> Iterator[Celery]:
    import mainboard.tasks.stages  # noqa: F401 - the stage tasks, as a pipeline would import

    app = make_app(broker_url=broker.url)
    yield app
    app.close()


def test_shipped_workers_know_every_task_and_serve_only_their_queue(
        deployed: dict[str, Deployed], client: Celery) -> None:
    names = [w.name for w in deployed.values()]
    inspect = client.control.inspect(destination=names, timeout=10)
    registered, queues = inspect.registered(), inspect.active_queues()
    for label, worker in deployed.items():
        assert TASKS <= set(registered[worker.name]), (label, registered[worker.name])
        assert [q["name"] for q in queues[worker.name]] == [worker.queue], label


def test_routes_send_stage_and_integrate_tasks_to_their_queues(
        deployed: dict[str, Deployed], client: Celery) -> None:
    router = client.amqp.router
    assert client.conf.task_routes == TASK_ROUTES
    for name in TASKS:
        want = COORDINATOR_QUEUE if name == TASK_NAME else BATCH_QUEUE
        assert router.route({}, name)["queue"].name == want, name
    # a stage task sent with no queue reaches a batch worker (and finds no such run)
    out = client.tasks[STAGE_PREFIX + "sample"].delay("no-such-run", 0, 0, 10).get(timeout=30)
    assert out["stored"] is False and "not defined in this broker" in out["skipped"]
    # the integrate task reaches a coordinator worker, which refuses a bad run dict
    sent = client.tasks[TASK_NAME].delay({"name": "bad"})
    with pytest.raises(Exception, match="<run dict>: seed: missing required key"):
        sent.get(timeout=60)
    coordinators = [w for w in deployed.values() if w.queue == COORDINATOR_QUEUE]
    assert any(f"{TASK_NAME}[{sent.id}] received" in w.text() for w in coordinators)


def test_a_pickled_message_on_the_batch_queue_is_refused(
        deployed: dict[str, Deployed], client: Celery, broker: RedisServer,
        tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    task_id = str(uuid.uuid4())
    headers = {"lang": "py", "task": STAGE_PREFIX + "sample", "id": task_id, "root_id": task_id,
               "parent_id": None, "group": None, "retries": 0, "eta": None, "expires": None,
               "timelimit": [None, None], "argsrepr": "(...)", "kwargsrepr": "{}",
               "origin": "attacker"}
    body = pickle.dumps(((_TouchOnUnpickle(marker),), {}, {}))
    with client.connection_for_write() as conn:
        conn.Producer().publish(body, exchange="", routing_key=BATCH_QUEUE, headers=headers,
                                content_type=PICKLE, content_encoding="binary")
    batch_workers = [w for w in deployed.values() if w.queue == BATCH_QUEUE]
    deadline = time.monotonic() + 30
    while (not any("ContentDisallowed" in w.text() for w in batch_workers)
           and time.monotonic() < deadline):
        time.sleep(0.1)
    logs = "".join(w.text() for w in batch_workers)
    assert "ContentDisallowed" in logs and "untrusted content of type pickle" in logs
    assert not marker.exists()
    assert f"[{task_id}] succeeded" not in logs and f"[{task_id}] received" not in logs
    r = redis.Redis.from_url(broker.url)
    assert r.llen(f"{keys.CELERY_PREFIX}{BATCH_QUEUE}") == 0  # dropped, not requeued
    assert all(w.proc.poll() is None for w in deployed.values())
    out = client.tasks[STAGE_PREFIX + "sample"].delay("still-serving", 0, 0, 1).get(timeout=30)
    assert out["stored"] is False  # the batch workers still serve
