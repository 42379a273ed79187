"""Live tier: node roles. Two real fleet workers on the local host; ``fleet unassign`` and
``fleet assign`` move one off and on the batch queue while it runs (it takes batches only
while assigned), a worker started again under the same id keeps its roles, and ``fleet
stop`` stops one of the two while a run goes on: the run finishes on the other, identical
to the in-process driver.

No wall clock: the run's survivor holds its first batch until the test opens a gate file,
and the other worker's evaluations wait until it does: the run cannot end before the stop
has (the gate is an event the test controls).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import mainboard
from mainboard import keys
from mainboard.fleet.records import read_fleet
from mainboard.fleet.workers import broker_route, registry
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.spec import load_run_file
from mainboard.receipts import WorkerStarted
from mainboard.tasks import BATCH_QUEUE
from mainboard.tasks.app import make_app
from mainboard.tasks.fleet import PROBE_TASK
from mainboard.tasks.workers import worker_command, worker_env
from tests.support.fleet_helpers import cli, config, status, tear_down, up_ok, wait_until, workspace
from tests.support.waiting import answered

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]

GATED = '''\
import os
import time
from pathlib import Path

import numpy as np


def f(x, hold="", gate="", held=""):
    """A 2-d Gaussian; the fleet worker ``hold`` marks ``held`` and waits for ``gate``, and
    every other evaluation waits until it holds one: the run cannot end before the gate."""
    if hold and os.environ.get("MAINBOARD_FLEET_WORKER") == hold:
        Path(held).touch()
        while not Path(gate).exists():
            time.sleep(0.02)
    elif hold:
        while not Path(held).exists():
            time.sleep(0.02)
    return np.exp(-16.0 * ((x - 0.5) ** 2).sum(axis=1))
'''


@dataclass
class Pair:
    ws: Path
    workers: list[WorkerStarted]


def _online(ws: Path) -> list[dict[str, Any]]:
    rows = [r for r in status(ws) if r["online"]]
    return rows if len(rows) == 2 else []


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    ws = workspace(tmp_path_factory.mktemp("roles") / "ws")
    try:
        up_ok(ws, "--on", "local", "--on", "local", "--no-flower")
        wait_until(lambda: _online(ws), 120, "two fleet workers online")
        yield Pair(ws, read_fleet(ws / ".mainboard").live())
    finally:
        tear_down(ws)


def _roles(ws: Path, verb: str, worker: str, *args: str) -> dict[str, Any]:
    done = cli(ws, "fleet", verb, worker, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _probe_nodes(ws: Path, n: int) -> set[str]:
    """Who ran ``n`` probes sent to the batch queue (node names before the ``@``)."""
    route = broker_route(config(ws), start=False)
    assert route is not None
    app = make_app(broker_url=route.url)
    try:
        results = [app.send_task(PROBE_TASK, queue=BATCH_QUEUE) for _ in range(n)]
        return {r.get(timeout=60)["node"].partition("@")[0] for r in results}
    finally:
        app.close()


def test_unassign_and_assign_move_a_live_worker_off_and_on_the_batch_queue(pair: Pair) -> None:
    one, two = pair.workers
    off = _roles(pair.ws, "unassign", one.node, "--role", "evaluator")
    assert off["queues"] == [BATCH_QUEUE] and off["consume"] is False
    assert [BATCH_QUEUE not in q for q in off["consumed"].values()] == [True]
    assert _probe_nodes(pair.ws, 6) == {two.node}  # only the assigned one takes batches
    shown = {r["worker_id"]: r for r in status(pair.ws)}
    assert BATCH_QUEUE not in shown[one.worker_id]["queues"]
    assert all(len(r["uuid"]) == 32 for r in shown.values())  # name + process uuid
    on = _roles(pair.ws, "assign", one.worker_id, "--queues", BATCH_QUEUE)
    assert [BATCH_QUEUE in q for q in on["consumed"].values()] == [True]
    said = cli(pair.ws, "fleet", "unassign", two.node, "--queues", BATCH_QUEUE)  # as people read it
    assert said.returncode == 0, said.stderr
    head, *consumers = said.stdout.splitlines()
    assert head == f"{two.host}: worker {two.node} no longer consumes {BATCH_QUEUE}"
    assert len(consumers) == 1 and consumers[0].startswith(f"  {two.node}@")
    assert BATCH_QUEUE not in consumers[0].partition(": consuming ")[2].split(",")
    try:
        assert _probe_nodes(pair.ws, 3) == {one.node}  # back on the queue: it takes them
    finally:
        _roles(pair.ws, "assign", two.node, "--role", "evaluator")
    assert read_fleet(pair.ws / ".mainboard").roles == {
        one.worker_id: {BATCH_QUEUE: True}, two.worker_id: {BATCH_QUEUE: True}}


def test_a_worker_started_again_under_its_id_keeps_its_roles(pair: Pair,
                                                             tmp_path: Path) -> None:
    """A fleet worker (``-I mainboard.tasks.fleet``, ``$MAINBOARD_FLEET_WORKER``) started
    under an id that has roles applies them before it registers (the registry's
    ``queues`` field is written after): the event the test waits for."""
    route = broker_route(config(pair.ws), start=False)
    assert route is not None
    worker_id = "restarted-" + uuid.uuid4().hex[:8]
    with registry(route) as client:
        client.hset(keys.worker_roles(worker_id),
                    mapping={BATCH_QUEUE: "0", "mainboard.extra": "1"})
    node = f"again-{worker_id}@{socket.gethostname()}"
    env = {**worker_env(route.url), "MAINBOARD_FLEET_WORKER": worker_id}
    with (tmp_path / "worker.log").open("ab") as log:
        proc = subprocess.Popen([*worker_command(node), "-I", "mainboard.tasks.fleet"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    app = make_app(broker_url=route.url)
    try:
        def registered() -> str | None:
            with registry(route) as client:
                return client.hget(keys.worker(node), "queues")
        assert wait_until(registered, 60, "the restarted worker registered") == "mainboard.extra"
        found = answered(lambda rest: app.control.inspect(destination=rest, timeout=5)
                         .active_queues(), [node], 60, "the restarted worker's queues")
        assert sorted(q["name"] for q in found[node]) == ["mainboard.extra"]
    finally:
        app.close()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def test_fleet_stop_stops_one_of_two_while_a_run_goes_on_identical(pair: Pair,
                                                                   tmp_path: Path) -> None:
    keep, gone = pair.workers
    runs = pair.ws / "runs"
    runs.mkdir(exist_ok=True)
    (runs / "gated_roles.py").write_text(GATED)
    gate, held = tmp_path / "gate", tmp_path / "held"
    run_file = runs / "stop-one.toml"
    run_file.write_text(
        'name = "stop-one"\nseed = 11\n[domain]\ncontinuous = 2\n'
        f'[integrand]\nkind = "python"\ntarget = "gated_roles:f"\n'
        f'params = {{ hold = "{keep.worker_id}", gate = "{gate}", held = "{held}" }}\n'
        '[sampler]\nkind = "vegas"\nbins = 8\n[stop]\nmax_iterations = 3\n'
        '[batching]\nbatch_size = 500\nbatches_per_iteration = 4\n')
    done: dict[str, Any] = {}
    route = broker_route(config(pair.ws), start=False)
    assert route is not None

    def gone_done() -> int:  # batches (and earlier probes) the worker to stop has run
        with registry(route) as client:
            return sum(int(client.hget(keys.worker(n), "tasks_done") or 0)
                       for n in client.zrange(keys.workers_index(), 0, -1)
                       if n.startswith(gone.node + "@"))

    baseline = gone_done()
    runner = threading.Thread(target=lambda: done.update(
        result=mainboard.integrate(run_file, workers=0, config=config(pair.ws))))
    runner.start()
    try:
        before = {r["worker_id"]: r["tasks_done"] for r in status(pair.ws)}
        wait_until(lambda: gone_done() > baseline, 120, "the worker to stop took a batch of the run")
        stopped = cli(pair.ws, "fleet", "stop", gone.node)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout == f"{gone.host}: worker {gone.node} completed\n"
        assert not done, "the run ended before the stop: the gate did not hold it"
    finally:
        gate.write_text("open")
        runner.join(timeout=240)
    rows = {r["worker_id"]: r for r in status(pair.ws, "--all")}
    assert rows[gone.worker_id]["state"] == "stopped"
    assert rows[keep.worker_id]["online"] and (rows[keep.worker_id]["tasks_done"] or 0) > (
        before[keep.worker_id] or 0)
    local = integrate_local(load_run_file(run_file))
    result = done["result"]
    assert (result.estimate, result.error, result.samples, result.iterations) == (
        local.estimate, local.error, local.samples, local.iterations)


@pytest.mark.parametrize(("args", "expect"), [
    (["assign", "nope", "--role", "evaluator"], "no live fleet worker 'nope'; live workers: none"),
    (["unassign", "nope"], "give --queues Q[,Q...] or --role evaluator|coordinator"),
    (["assign", "nope", "--queues", "a b"], "--queues: 'a b' is not a queue name"),
    (["stop", "nope"], "no live fleet worker 'nope'"),
    (["assign", "nope", "--role", "boss"], "'boss' is not one of 'evaluator', 'coordinator'"),
])
def test_bad_roles_input_is_one_line_exit_2_and_nothing_recorded(tmp_path: Path,
                                                                 args: list[str],
                                                                 expect: str) -> None:
    ws = workspace(tmp_path / "ws")
    done = cli(ws, "fleet", *args)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], lines
    assert not (ws / ".mainboard" / "fleet.ndjson").exists()


def test_down_drains_a_worker_that_was_not_in_the_registry_when_first_asked(
        tmp_path: Path) -> None:
    """`fleet down` asks the workers it finds in the registry to drain; one that had not
    beat there yet (started a moment before: seen after a Sentinel failover's warm start)
    was never asked and was cancelled at the timeout. Its entry removed just before the
    down, its next beat (every few seconds) puts it back and the down asks it then: it
    drains (completed), well before the timeout."""
    ws = workspace(tmp_path / "ws")
    try:
        up_ok(ws, "--on", "local", "--no-flower")
        wait_until(lambda: [r for r in status(ws) if r["online"]], 120, "the worker online")
        route = broker_route(config(ws), start=False)
        assert route is not None
        with registry(route) as client:
            (node,) = [n for n in client.zrange(keys.workers_index(), 0, -1)
                       if n.startswith("local-")]
            client.zrem(keys.workers_index(), node)
            client.delete(keys.worker(node))
        done = cli(ws, "fleet", "down", "--timeout", "120")
        assert done.returncode == 0, done.stderr
        (line,) = done.stdout.splitlines()
        assert line.startswith("local: worker ") and line.endswith(" completed"), line
    finally:
        tear_down(ws)
