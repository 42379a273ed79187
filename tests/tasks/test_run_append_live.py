"""`runs append` to a LIVE run: the driving coordinator takes the tasks before it would
finish; an append racing the run's end is neither lost nor doubled; a coordinator that
cannot take appends (a scan's child, another workspace's run) refuses in one line.

Real Redis, real `mainboard` subprocesses, and the module's fleet of 2 Celery workers
(``--workers 0``: each run's own workers are not what these tests are about). The runs are
held live by a gate (``tests.support.run_integrands:gated_gauss`` waits for a file), so
every step waits for an event: a receipt line, the run's inbox in Redis, a process exit.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import mainboard
from mainboard import keys
from mainboard.config import Config
from mainboard.errors import UserError
from mainboard.integrators.driver import RunResult
from mainboard.integrators.spec import load_run_file
from mainboard.receipts import (
    ChildStarted,
    IterationDone,
    Receipts,
    RunCreated,
    RunFinished,
    TaskDone,
    TasksAppended,
)
from mainboard.runs.store import RECEIPTS_NAME, RunStore
from mainboard.tasks.appends import Appended, Inbox, offer
from mainboard.tasks.lease import Lease
from mainboard.tasks.runner import append as append_tasks
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import fleet_iter, write_workspace
from tests.support.run_tasks import HEAD, cli, integrate_in_background, task, task_receipts
from tests.support.services import RedisServer

MORE = task("sample", "more", frozen=True, nr_samples=8000)
OWN = task("sample", "first", nr_samples=20000)


def gated_head(name: str, gate: Path) -> str:
    """HEAD renamed, its Gaussian held until the file ``gate`` exists (20000 samples)."""
    return HEAD.replace('"tasks-gauss"', f'"{name}"').replace(
        'kind = "genz.gaussian"\na = [3.0, 3.0, 3.0]\nu = [0.4, 0.5, 0.6]',
        'kind = "python"\ntarget = "tests.support.run_integrands:gated_gauss"\n'
        f'params = {{ gate = {json.dumps(str(gate))}, a = 3.0 }}')


def receipts(config: Config, run_id: str) -> list[object]:
    return list(Receipts(config.state_dir / "runs" / run_id / RECEIPTS_NAME).read())


def wait_for(what: Callable[[], bool], r: redis.Redis, proc: subprocess.Popen[str]) -> None:
    """Until ``what`` holds, the run's process still alive (looks 0.05 s apart)."""
    while not what():
        assert proc.poll() is None, proc.communicate()
        r.blpop(["mainboard-test:never"], timeout=0.05)


def inbox_state(r: redis.Redis, run_id: str) -> str | None:
    raw = r.get(keys.run_inbox(run_id))
    return None if raw is None else json.loads(raw)["state"]


def tasks_of(config: Config, run_id: str) -> tuple[str, list[tuple[str, str, int]]]:
    listed = cli(config, "runs", "tasks", run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    table = json.loads(listed.stdout)
    return table["status"], [(t["name"], t["state"], t["samples"]) for t in table["tasks"]]


@pytest.fixture(scope="module", autouse=True)
def fleet(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[LocalWorkers]:
    """The module's 2 workers: every run here is served by them (``--workers 0``); each
    test writes its own workspaces."""
    yield from fleet_iter(2, redis_server, tmp_path_factory.mktemp("fleet"))


@pytest.fixture()
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


def start_gated(config: Config, name: str, tail: str = "") -> tuple[str, Path,
                                                                      subprocess.Popen[str]]:
    """A gated run started in the background: its id, its gate, its process."""
    gate = config.root / f"{name}.gate"
    path = config.root / f"{name}.toml"
    path.write_text(gated_head(name, gate) + tail)
    return load_run_file(path).run_id(), gate, integrate_in_background(config, path, workers=0)


# ---------------------------------------------------------------- live append
@pytest.mark.live
@pytest.mark.parametrize("own", ["", OWN], ids=["no-tasks", "own-tasks"])
def test_a_live_run_takes_an_appended_task_and_ends_with_it_done(
        tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer,
        r: redis.Redis, own: str) -> None:
    """Appended while the run's (implicit or own) sample task runs: `--json` says the live
    run took it, the run ends with it done (recorded once), and its numbers equal those of
    the same task appended after the run finished."""
    config = write_workspace(tmp_path_factory.mktemp("live"), redis_server)
    run_id, gate, runner = start_gated(config, "append-live", own)
    wait_for(lambda: inbox_state(r, run_id) == "open", r, runner)
    bad = config.root / "bad.toml"  # bad input to a live run: one line, nothing stored
    bad.write_text('[[tasks]]\nkind = "sample"\nfrom = "nope"\n')
    refused = cli(config, "runs", "append", run_id, str(bad), "--json")
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "tasks[0].from" in refused.stderr
    assert not any(isinstance(p, TasksAppended) for p in receipts(config, run_id))
    task = config.root / "more.toml"
    task.write_text(MORE)
    done = cli(config, "runs", "append", run_id, str(task), "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["live"] is True and got["appended"] == 1 and got["run_id"] == run_id
    assert got["by"].startswith("pid ") and got["continues"] is None
    gate.touch()
    out, err = runner.communicate(timeout=180)
    assert runner.returncode == 0, err[-3000:]
    assert json.loads(out)["samples"] == 8000  # the appended task's own
    status, rows = tasks_of(config, run_id)
    named = [("first", "done", 20000)] if own else []
    assert status == "finished" and rows == [*named, ("more", "done", 8000)]
    lines = receipts(config, run_id)
    assert sum(isinstance(p, TasksAppended) for p in lines) == 1
    assert isinstance(lines[-1], RunFinished)
    assert not r.exists(keys.run_inbox(run_id)) and not r.exists(keys.run_lease(run_id))

    # the same task appended once the run finished: the same numbers
    other = write_workspace(tmp_path_factory.mktemp("after"), redis_server)
    path = other.root / "append-live.toml"
    path.write_text(gated_head("append-live", gate) + own)
    assert mainboard.integrate(path, workers=0, config=other).run_id == run_id
    (other.root / "more.toml").write_text(MORE)
    after = cli(other, "runs", "append", run_id, str(other.root / "more.toml"),
                "--workers", "0", "--json")
    assert after.returncode == 0, after.stderr[-3000:]
    assert json.loads(after.stdout)["live"] is False
    assert [(t.name, t.samples, t.estimate, t.error) for t in task_receipts(other, run_id)] \
        == [(t.name, t.samples, t.estimate, t.error) for t in task_receipts(config, run_id)]


@pytest.mark.live
def test_an_append_racing_the_runs_end_is_done_exactly_once(
        tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer,
        r: redis.Redis) -> None:
    """The append starts and the run's last iteration is recorded while the test holds the
    append lock, so the coordinator's end and the append both wait for it; released
    together, either may win: the
    live run takes the task, or the append finds it ended and continues it. Either way
    the task is recorded once and done once."""
    config = write_workspace(tmp_path_factory.mktemp("race"), redis_server)
    run_id, gate, runner = start_gated(config, "append-race")
    wait_for(lambda: inbox_state(r, run_id) == "open", r, runner)
    lock = keys.run_append_lock(run_id)
    # the inbox reads "open" a moment before the coordinator lets the lock go (it sets the
    # state under the lock): the test takes it once it is free
    wait_for(lambda: bool(r.set(lock, "the-test", nx=True, px=60_000)), r, runner)
    task = config.root / "more.toml"
    task.write_text(MORE)
    got: list[object] = []

    def append() -> None:  # in this process: it reaches the lock long before the run ends
        try:
            got.append(append_tasks(run_id, task, 0, config=config))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            got.append(exc)

    appender = threading.Thread(target=append)
    appender.start()
    gate.touch()
    wait_for(lambda: any(isinstance(p, IterationDone) and p.samples == 20000
                         for p in receipts(config, run_id)), r, runner)
    r.delete(lock)  # both wait for it now: either may take it first
    appender.join(timeout=180)
    out, err = runner.communicate(timeout=180)
    assert runner.returncode == 0, err[-3000:]
    (taken,) = got
    result = json.loads(out)
    if isinstance(taken, Appended):  # the live run took it
        assert taken.live and taken.tasks == 1 and result["samples"] == 8000
    else:  # it found the run ended, and continued it
        assert isinstance(taken, RunResult), taken
        assert taken.samples == 8000 and result["samples"] == 20000
    status, rows = tasks_of(config, run_id)
    assert status == "finished" and rows == [("more", "done", 8000)]
    lines = receipts(config, run_id)
    assert sum(isinstance(p, TasksAppended) for p in lines) == 1
    assert sum(isinstance(p, TaskDone) for p in lines) == 1


@pytest.mark.live
def test_an_append_after_the_inbox_closed_continues_the_ended_run(
        tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer,
        r: redis.Redis) -> None:
    """Once the coordinator closed its inbox (it decided to finish), an append waits for
    the lease to go and continues the finished run: `--json` says the live run did not
    take it, the result is the appended task's."""
    config = write_workspace(tmp_path_factory.mktemp("closed"), redis_server)
    run_id, gate, runner = start_gated(config, "append-closed")
    wait_for(lambda: inbox_state(r, run_id) == "open", r, runner)
    gate.touch()
    while runner.poll() is None and inbox_state(r, run_id) == "open":
        r.blpop(["mainboard-test:never"], timeout=0.05)  # until it closed its inbox
    task = config.root / "more.toml"
    task.write_text(MORE)
    done = cli(config, "runs", "append", run_id, str(task), "--workers", "0", "--json")
    out, err = runner.communicate(timeout=180)
    assert done.returncode == 0 and runner.returncode == 0, done.stderr[-2000:] + err[-2000:]
    got = json.loads(done.stdout)
    assert got["live"] is False and got["samples"] == 8000
    assert json.loads(out)["samples"] == 20000
    status, rows = tasks_of(config, run_id)
    assert status == "finished" and rows == [("more", "done", 8000)]


# ---------------------------------------------------------------- refused
@pytest.mark.live
def test_an_append_to_a_scan_child_is_refused_in_one_line(
        tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer,
        r: redis.Redis) -> None:
    """A scan drives its child under the child's own lease, with no inbox: an append to
    the child cannot be taken, so it is refused (exit 2, one line) and nothing recorded."""
    config = write_workspace(tmp_path_factory.mktemp("scan"), redis_server)
    gate = config.root / "scan.gate"
    (config.root / "child.toml").write_text(gated_head("scan-child", gate))
    scan = config.root / "scan.toml"
    scan.write_text('name = "gated-scan"\nchild = "child.toml"\n[scan]\n'
                    'max_concurrent_runs = 1\n[[scan.parameters]]\n'
                    'name = "integrand.params.a"\nvalues = [3.0]\n')
    runner = integrate_in_background(config, scan, workers=0)
    parent = None

    def child_started() -> bool:
        nonlocal parent
        runs = RunStore(config.state_dir)
        for run in runs.ids() if runs.root.exists() else ():
            h = runs.history(run)
            if h is not None and h.created.kind == "scan":
                parent = h.run_id
        return parent is not None and any(
            isinstance(p, ChildStarted) for p in receipts(config, parent))

    wait_for(child_started, r, runner)
    (child,) = [p.child for p in receipts(config, parent) if isinstance(p, ChildStarted)]
    wait_for(lambda: bool(r.exists(keys.run_lease(child))), r, runner)
    task = config.root / "more.toml"
    task.write_text(MORE)
    try:
        refused = cli(config, "runs", "append", child, str(task))
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and refused.stdout == "", refused.stderr
        assert f"run {child} is driven by pid " in lines[0]
        assert "does not take appended tasks" in lines[0]
        assert not any(isinstance(p, TasksAppended) for p in receipts(config, child))
    finally:
        gate.touch()
        runner.communicate(timeout=180)
    assert runner.returncode == 0


def test_an_inbox_of_another_workspace_refuses_and_a_starting_one_is_waited_for(
        tmp_path: Path, r: redis.Redis) -> None:
    """The same run driven from workspace B (same broker): an append from workspace A is
    refused in one line naming B's store (B would never see it). From B, an append that
    finds the run still starting waits for its inbox to open, then is taken."""
    run_id = "inboxtest01"
    store_a, store_b = RunStore(tmp_path / "a"), RunStore(tmp_path / "b")
    store_b.record(RunCreated(run_id=run_id, name="n", spec={}))
    inbox = Inbox(r, store_b, Lease(r, run_id))
    inbox.acquire()
    try:
        def record(history: object) -> int:
            store_b.record(TasksAppended(run_id=run_id, tasks=[{"kind": "pause"}]))
            return 1

        with pytest.raises(UserError) as caught:
            offer(r, store_a, run_id, record)
        message = str(caught.value)
        assert "\n" not in message and "from another workspace" in message
        assert str(store_b.root.resolve()) in message

        got: list[object] = []
        waiter = threading.Thread(target=lambda: got.append(offer(r, store_b, run_id, record)))
        waiter.start()
        assert inbox_state(r, run_id) == "starting"
        inbox.open()
        waiter.join(timeout=30)
        (taken,) = got
        assert taken.live and taken.tasks == 1  # type: ignore[attr-defined]
        assert len(store_b.history(run_id).appended) == 1  # type: ignore[union-attr]
        assert inbox.take(0) is not None and inbox_state(r, run_id) == "open"
        assert inbox.take(1) is None and inbox_state(r, run_id) == "closed"
    finally:
        inbox.lease.release()
        inbox.shut()
    assert not r.exists(keys.run_inbox(run_id))
    assert offer(r, store_b, run_id, record) is None  # no coordinator: the caller's turn


@pytest.mark.live
def test_an_open_inbox_lost_with_the_brokers_data_is_put_back_with_the_lease(
        tmp_path: Path, r: redis.Redis) -> None:
    """A broker that lost its data (a restart without persistence) lost the lease and the
    inbox: the coordinator's next refresh retakes the lease and puts its inbox back as it
    was, so an append is taken live again instead of refused as if a parent drove the run."""
    run_id = "inboxlost01"
    store = RunStore(tmp_path / "s")
    store.record(RunCreated(run_id=run_id, name="n", spec={}))
    inbox = Inbox(r, store, Lease(r, run_id))
    inbox.acquire()
    inbox.open()
    try:
        r.delete(keys.run_lease(run_id), keys.run_inbox(run_id))  # what a data loss leaves
        inbox.lease.refresh()
        assert r.get(keys.run_lease(run_id)).decode() == inbox.lease.token
        assert inbox_state(r, run_id) == "open"

        def record(history: object) -> int:
            store.record(TasksAppended(run_id=run_id, tasks=[{"kind": "pause"}]))
            return 1

        taken = offer(r, store, run_id, record)
        assert taken is not None and taken.live and taken.tasks == 1
        inbox.lease.refresh()  # held all along: nothing to put back, the state is kept
        assert inbox_state(r, run_id) == "open"
    finally:
        inbox.lease.release()
        inbox.shut()
