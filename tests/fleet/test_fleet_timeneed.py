"""Time needs (issue 19, part 3): a task is not started on a worker with less time left.

Pure parts first (the header, the comparison, what a run's messages carry); then, live, a
real SLURM allocation whose walltime is 2 minutes (its worker reads its end from squeue):
a task declaring ``time_request = 600`` is put back in the queue there, never run, and runs
on the worker of a second pool without a walltime once that one is up; a task without a
need, and one whose need fits, run on the short-lived worker meanwhile. About 20 s each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mainboard.integrators.spec import RunSpec
from mainboard.tasks.dispatch import Dispatch
from mainboard.tasks.timeneed import HEADER, need_of, refuses
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.fleet_helpers import (
    HOST_PYTHON,
    config,
    provisioned_root,  # noqa: F401 - session fixture
    table,
    tear_down,
    up_ok,
    wait_until,
    workspace,
)
from tests.support.services import SlurmCluster

QUEUE = "t19n.q"
RUN = {"name": "needs", "seed": 1, "domain": {"continuous": 1},
       "integrand": {"kind": "constant", "value": 1.0}, "stop": {"max_iterations": 1}}


@pytest.mark.parametrize(("headers", "need"), [
    ({HEADER: 600}, 600.0), ({HEADER: "90.5"}, 90.5), ({}, None), (None, None),
    ({HEADER: 0}, None), ({HEADER: -5}, None), ({HEADER: "soon"}, None),
    ({HEADER: float("inf")}, None), ({HEADER: True}, None)])
def test_a_message_declares_its_time_need_in_one_header(headers: dict | None,
                                                         need: float | None) -> None:
    assert need_of(headers) == need


def test_only_a_need_larger_than_the_time_left_is_refused() -> None:
    assert refuses(600.0, 90.0)
    assert not refuses(60.0, 90.0) and not refuses(90.0, 90.0)
    assert not refuses(None, 5.0)  # no need: runs whatever is left
    assert not refuses(600.0, None)  # no end known (no walltime): every task starts


def test_a_runs_messages_carry_its_time_request_else_the_measured_task_time() -> None:
    from mainboard.integrators.spec import parse_run

    plain = parse_run(dict(RUN), file="<t>")
    measured: list[float | None] = [None]
    dispatch = Dispatch(object(), "r1", plain, lambda: measured[0])  # type: ignore[arg-type]
    assert dispatch.headers() == {}  # nothing measured yet: no need
    measured[0] = 2.34567
    assert dispatch.headers() == {HEADER: 2.346}
    declared = parse_run({**RUN, "batching": {"time_request": 600}}, file="<t>")
    assert Dispatch(object(), "r2", declared, lambda: 2.0).headers() == {HEADER: 600.0}  # type: ignore[arg-type]
    assert declared.run_id() != plain.run_id()
    assert "time_request" not in plain.model_dump()["batching"]  # old run ids unchanged


def test_every_task_of_the_app_goes_through_the_time_need_check() -> None:
    """Stage tasks (a run's bundles and chains), the coordinator task, the probe, and a
    pipeline's own task defined on the app: one strategy."""
    import mainboard.tasks.fleet  # noqa: F401 - registers the probe
    from mainboard.tasks.app import make_app

    app = make_app(broker_url="redis://127.0.0.1:1/0")
    try:
        app.loader.import_default_modules()

        @app.task(name="t19n.mine")
        def mine() -> None:
            """A user's own task."""

        names = ["mainboard.stages.bundle", "mainboard.stages.sample", "mainboard.integrate",
                 "mainboard.fleet.probe", "t19n.mine"]
        assert {app.tasks[n].Strategy for n in names} == {"mainboard.tasks.timeneed:strategy"}
    finally:
        app.close()


def test_a_bad_time_request_names_its_key() -> None:
    from mainboard.errors import UserError
    from mainboard.integrators.spec import parse_run

    with pytest.raises(UserError, match="batching.time_request"):
        parse_run({**RUN, "batching": {"time_request": -3}}, file="run.toml")
    assert isinstance(parse_run(dict(RUN), file="<t>"), RunSpec)


def _app(ws: Path):  # -> Celery
    from mainboard.fleet.workers import broker_route
    from mainboard.tasks.app import make_app

    route = broker_route(config(ws), start=False)
    assert route is not None
    return make_app(broker_url=route.url)


def _send(app, need: float | None, tag: str):  # -> AsyncResult
    from mainboard.tasks.fleet import PROBE_TASK

    return app.send_task(PROBE_TASK, kwargs={"sleep_s": 0.1}, queue=QUEUE, task_id=tag,
                         headers={HEADER: need} if need is not None else {})


def _wait_put_backs(ws: Path, task_id: str, count: int) -> None:
    """Wait until ``task_id`` has been put back ``count`` times (its count in Redis)."""
    from mainboard import keys
    from mainboard.fleet.workers import broker_route
    from mainboard.redisclient import redis_client

    route = broker_route(config(ws), start=False)
    assert route is not None
    r = redis_client(route.url)
    try:
        wait_until(lambda: int(r.hget(keys.time_need(task_id), "count") or 0) >= count, 120,
                   f"{task_id} put back {count} times")
    finally:
        r.close()


def _job_log(ws: Path, pool: str) -> str:
    from mainboard.fleet.records import read_fleet

    (worker,) = [w for w in read_fleet(ws / ".mainboard").started.values() if w.pool == pool]
    job_dir = Path(worker.job["job_dir"])
    return "".join((job_dir / n).read_text() for n in ("stdout", "stderr")
                   if (job_dir / n).exists())


def test_a_job_without_a_scheduler_to_ask_ends_walltime_after_its_start_stamp(
        tmp_path: Path) -> None:
    from mainboard.tasks.fleet import walltime_end

    (tmp_path / "started").write_text("1796300000,25\n")  # EPOCHREALTIME in a comma locale
    assert walltime_end(str(tmp_path), "120") == 1796300120.25
    assert walltime_end(str(tmp_path), "") is None  # no walltime: no end
    assert walltime_end(str(tmp_path / "nowhere"), "120") is None


@pytest.mark.live
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["slurm", "local"])
def test_a_task_needing_more_time_than_the_allocation_has_left_runs_elsewhere(
        kind: str, tmp_path: Path, slurm_cluster: SlurmCluster,  # noqa: F811
        provisioned_root: Path) -> None:  # noqa: F811
    """SLURM: the end asked of squeue; local (as ssh and rentals): the job script's start
    stamp plus the walltime its watchdog enforces."""
    host = dict(kind="slurm", partition="debug", root=str(provisioned_root),
                python=HOST_PYTHON, env={"SLURM_CONF": str(slurm_cluster.conf)}) \
        if kind == "slurm" else dict(kind="local", root=str(provisioned_root))
    ws = workspace(tmp_path / "ws", table("hosts.cluster", **host),
                   table("fleet.pools.short", host="cluster", queues=[QUEUE], walltime="2m",
                         retire_before="30s"),
                   table("fleet.pools.long", host="cluster", queues=[QUEUE]))
    app = None
    try:
        up_ok(ws, "--pool", "short", "--no-flower")
        app = _app(ws)
        long_task = _send(app, 600, "needs-600s")
        plain, fits = _send(app, None, "no-need"), _send(app, 20, "needs-20s")
        short_node = plain.get(timeout=120)["node"]
        assert fits.get(timeout=60)["node"] == short_node  # 20 s fit in what is left
        wait_until(lambda: "not starting mainboard.fleet.probe needs-600s here: it needs "
                   "600 s, this allocation ends in" in _job_log(ws, "short"), 30,
                   "the short-lived worker putting the 600 s task back")
        _wait_put_backs(ws, "needs-600s", 3)  # a few more refusals: it is never run there
        assert not long_task.ready()
        assert _job_log(ws, "short").count("not starting mainboard.fleet.probe needs-600s") == 1
        up_ok(ws, "--pool", "long", "--no-flower")
        ran = long_task.get(timeout=120)
        assert ran["node"] != short_node and ran["node"].startswith(f"{kind}-cluster-")
        assert ran["task_id"] == "needs-600s"
    finally:
        if app is not None:
            app.close()
        down = tear_down(ws, "--timeout", "10")
    assert down.returncode == 0, down.stderr


NEVER_FITS = """name = "never-fits"
seed = 3
[domain]
continuous = 1
[integrand]
kind = "constant"
value = 1.0
[stop]
max_iterations = 1
[batching]
batch_size = 100
time_request = 600
"""


def test_put_backs_end_after_the_wait_from_the_first_or_a_count() -> None:
    from mainboard.tasks.timeneed import PutBacks, bounds, given_up, unmet_line

    assert bounds({}, {}) == (600.0, None)  # the default: 10 min, no count limit
    assert bounds({"time_request_wait": 5}, {"MAINBOARD_TIME_NEED_WAIT_S": "60"}) == (5.0, None)
    assert bounds(None, {"MAINBOARD_TIME_NEED_WAIT_S": "60",
                         "MAINBOARD_TIME_NEED_PUTBACKS": "4"}) == (60.0, 4)
    assert bounds({"time_request_wait": "soon"}, {}) == (600.0, None)  # not a number: default
    seen = PutBacks(first=1000.0, count=3, walls={"short": "120", "tiny": ""})
    assert not given_up(seen, 1059.0, 60.0, None) and given_up(seen, 1060.0, 60.0, None)
    assert given_up(seen, 1001.0, 60.0, 3) and not given_up(seen, 1001.0, 60.0, 4)
    line = unmet_line("t.task", "id-1", 600.0, seen, 1060.0)
    assert "\n" not in line
    assert line.startswith("t.task id-1 not run: it needs 600 s (time_request)")
    assert "pool short: walltime 120 s, pool tiny: no walltime known" in line
    assert "put back 3 time(s) over 60 s" in line


@pytest.mark.live
@pytest.mark.timeout(300)
def test_a_task_no_pool_has_the_time_for_fails_in_one_line_after_its_wait(
        tmp_path: Path, provisioned_root: Path) -> None:  # noqa: F811
    """A real local worker whose allocation is 2 minutes: a probe needing 600 s fails after
    its 2 s wait (its header) with the line naming its need and the pool's walltime; a run
    whose batches need 600 s fails with that line in `runs show` and `runs logs` (the wait
    from the worker's environment)."""
    import json

    from mainboard.tasks.fleet import PROBE_TASK
    from mainboard.tasks.timeneed import WAIT_HEADER
    from tests.support.fleet_helpers import cli

    ws = workspace(tmp_path / "ws",
                   table("hosts.cluster", kind="local", root=str(provisioned_root),
                         env={"MAINBOARD_TIME_NEED_WAIT_S": "2"}),
                   table("fleet.pools.short", host="cluster", queues=[QUEUE, "mainboard.batches"],
                         walltime="2m", retire_before="30s"))
    (ws / "run.toml").write_text(NEVER_FITS)
    app = None
    try:
        up_ok(ws, "--pool", "short", "--no-flower")
        app = _app(ws)
        probe = app.send_task(PROBE_TASK, kwargs={"sleep_s": 0.1}, queue=QUEUE,
                              task_id="needs-600s-once", headers={HEADER: 600, WAIT_HEADER: 2})
        with pytest.raises(Exception) as failed:
            probe.get(timeout=60)
        line = str(failed.value)
        assert type(failed.value).__name__ == "TimeNeedUnmet"
        assert line.startswith("mainboard.fleet.probe needs-600s-once not run: it needs 600 s")
        assert "pool short: walltime 120 s" in line and "\n" not in line
        wait_until(lambda: line in _job_log(ws, "short"), 10, "the line in the worker log")

        done = cli(ws, "integrate", "run.toml", "--workers", "0", "--json")
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert "it needs 600 s (time_request) and no worker had that long (pool short: " \
               "walltime 120 s)" in done.stderr, done.stderr
        shown = cli(ws, "runs", "show", "never-fits", "--json")
        assert shown.returncode == 0, shown.stderr
        assert "it needs 600 s (time_request)" in json.dumps(json.loads(shown.stdout))
        logs = cli(ws, "runs", "logs", "never-fits")
        assert "it needs 600 s (time_request)" in logs.stdout, logs.stdout + logs.stderr
    finally:
        if app is not None:
            app.close()
        down = tear_down(ws, "--timeout", "10")
    assert down.returncode == 0, down.stderr


@pytest.mark.live
@pytest.mark.timeout(300)
def test_an_autoscaled_pool_asks_the_walltime_a_queued_time_need_wants(
        tmp_path: Path, provisioned_root: Path) -> None:  # noqa: F811
    """A pool at zero whose walltime may be 1 to 30 minutes: a task needing 600 s queued,
    the keeper submits one allocation asking 600 s + retire_before 30 s, in whole minutes
    (11 min), and the task runs there."""
    from mainboard.fleet.autoscale import SCALE_TICK_ENV
    from mainboard.fleet.records import read_fleet

    ws = workspace(tmp_path / "ws", table("hosts.cluster", kind="local",
                                          root=str(provisioned_root)),
                   table("fleet.pools.sized", host="cluster", queues=[QUEUE], max_jobs=1,
                         walltime="1m", max_walltime="30m", retire_before="30s",
                         idle_timeout="5m"))
    app = None
    try:
        up_ok(ws, "--pool", "sized", "--no-flower", env={SCALE_TICK_ENV: "0.2"})
        app = _app(ws)
        needy = _send(app, 600, "needs-600s-sized")
        (started,) = wait_until(lambda: [w for w in read_fleet(ws / ".mainboard").live()
                                         if w.pool == "sized"], 60, "the sized allocation")
        assert started.job["spec"]["walltime"] == 660
        # the keeper writes its scale receipt after the allocation's own start record
        scale = wait_until(lambda: [e for e in read_fleet(ws / ".mainboard").scale
                                    if e.action == "submit"], 60, "the submit receipt")
        assert "walltime 660 s for a 600 s time need" in scale[-1].reason
        assert needy.get(timeout=120)["task_id"] == "needs-600s-sized"
    finally:
        if app is not None:
            app.close()
        down = tear_down(ws, "--timeout", "10")
    assert down.returncode == 0, down.stderr
