"""Local workers stopped with a task in hand (a run that finished while a batch it no longer
needs was running): the warm shutdown lets the task end and the worker logs no
``WorkerLostError``. A TERM to the worker's whole process group used to kill the pool child
holding the task, so every such stop left a traceback in the worker's log."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mainboard.tasks import workers as workers_module
from mainboard.tasks.app import make_app
from mainboard.tasks.workers import LocalWorkers
from tests.support.services import RedisServer

pytestmark = pytest.mark.live


@pytest.fixture()
def probe_workers(monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer,
                  tmp_path: Path) -> Iterator[LocalWorkers]:
    """One real local worker that also loads the probe tasks."""
    command = workers_module.worker_command
    monkeypatch.setattr(workers_module, "worker_command", lambda *a, **k: [
        *command(*a, **k), "-I", "tests.support.app_probe_tasks"])
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    workers = LocalWorkers(1, redis_server.url, tmp_path / "logs", queue="probe-stop",
                           env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                           python=sys.executable).start()
    try:
        yield workers
    finally:
        workers.stop(timeout=5)


def test_a_worker_stopped_with_a_task_in_hand_finishes_it_without_a_lost_worker(
        probe_workers: LocalWorkers, redis_server: RedisServer, tmp_path: Path) -> None:
    started, gate = tmp_path / "started", tmp_path / "gate"
    app = make_app(broker_url=redis_server.url)
    result = app.send_task("probe.gated", args=(str(started), str(gate)), queue="probe-stop")
    waiter = redis.Redis.from_url(redis_server.url)
    while not started.exists():  # the task is in the pool child's hands
        assert probe_workers.procs[0].poll() is None, probe_workers.log_of(0).read_text()
        waiter.blpop(["mainboard-test:never"], timeout=0.05)
    (proc,) = probe_workers.procs
    probe_workers.stop(timeout=120, wait=False)  # as a finished run stops its workers
    gate.touch()
    assert proc.wait(120) == 0
    assert result.get(timeout=30) == "done"
    log = probe_workers.log_of(0).read_text()
    assert "WorkerLostError" not in log and "Traceback" not in log, log
    assert "succeeded" in log
    waiter.close()
    app.close()
