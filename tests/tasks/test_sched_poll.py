"""Live tier: one scheduler query per tick per cluster (issue 29, item 3), counted on a
real SLURM with counting wrappers on PATH: fleet workers asking their allocation's end
share one ``squeue`` listing through Redis, whatever their number."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mainboard import keys
from mainboard.bridges import bridge_for
from mainboard.bridges.gate import GATES_ENV, gate_file, wait_turn
from mainboard.bridges.poller import RedisShare
from mainboard.bridges.slurm import parse_end
from mainboard.bridges.transport import LocalTransport
from mainboard.config import SlurmHost
from mainboard.errors import HostError
from mainboard.tasks import fleet
from mainboard.tasks.fleet import HOST_ENV, allocation_end
from mainboard.tasks.telemetry import KIND_ENV
from tests.support.fleet_helpers import (
    provisioned_root,  # noqa: F401 - session fixture
    wait_until,
)
from tests.support.sched_counting import counting_path, counts, one_by_one, workers_tick
from tests.support.services import RedisServer, SlurmCluster

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]
TICK = 60.0


@pytest.fixture
def jobs(slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
         ) -> Iterator[tuple[list[str], Path]]:
    """Three real jobs submitted through the counting wrappers; (their ids, the count log)."""
    log = tmp_path / "calls"
    env = slurm_cluster.env
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    monkeypatch.setenv("PATH", counting_path(tmp_path / "bin", log, env["PATH"]))
    ids = [subprocess.run(["sbatch", "--parsable", "-t", "5", "--wrap", "sleep 300"],
                          capture_output=True, text=True, check=True).stdout.strip()
           for _ in range(3)]
    wait_until(lambda: sorted(subprocess.run(  # running: their ends are fixed from now on
        ["squeue", "-h", "-t", "R", "-j", ",".join(ids), "-o", "%i"], capture_output=True,
        text=True).stdout.split()) == sorted(ids), 60, "the three jobs running")
    try:
        yield ids, log
    finally:
        subprocess.run(["scancel", *ids], check=False)


def _age(url: str, cluster: str) -> None:
    """The next tick: the stored listing made one tick older (what time would do)."""
    with redis.Redis.from_url(url) as client:
        at = float(client.hget(keys.sched_listing(cluster), "at"))
        client.hset(keys.sched_listing(cluster), "at", at - TICK - 1)


def test_the_squeue_count_per_tick_does_not_grow_with_the_workers(
        jobs: tuple[list[str], Path], redis_server: RedisServer) -> None:
    ids, log = jobs
    before = counts(log)["squeue"]
    one_by_one(ids)  # the old way: one query per worker
    assert counts(log)["squeue"] - before == len(ids)
    per_tick = {}
    for workers in (5, 50):
        cluster = f"test-{workers}"
        start = counts(log)["squeue"]
        got = workers_tick(redis_server.url, cluster, workers, TICK)
        _age(redis_server.url, cluster)
        again = workers_tick(redis_server.url, cluster, workers, TICK)
        per_tick[workers] = (counts(log)["squeue"] - start) / 2
        assert all(set(ids) <= set(g) for g in got + again), got[0]
        assert all(g == got[0] for g in got)  # everyone read the one listing
    assert per_tick == {5: 1.0, 50: 1.0}  # O(1) per tick, not O(workers)


def test_a_workers_end_comes_from_the_shared_listing_and_matches_squeue(
        jobs: tuple[list[str], Path], redis_server: RedisServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ids, log = jobs
    monkeypatch.setenv(HOST_ENV, "cluster-a")
    monkeypatch.setenv(KIND_ENV, "slurm")  # as fleet up starts a worker there
    client = redis.Redis.from_url(redis_server.url)
    monkeypatch.setattr(fleet, "_client", (os.getpid(), client))  # the worker's own client
    client.delete(keys.sched_listing("cluster-a"))
    direct = {i: subprocess.run(["squeue", "-h", "-j", i, "-o", "%e"], capture_output=True,
                                text=True, check=True).stdout.strip() for i in ids}
    start = counts(log)["squeue"]
    ends = [allocation_end(i) for i in ids]
    assert counts(log)["squeue"] - start == 1  # three workers, one query
    assert ends == [parse_end(direct[i]) for i in ids]
    # a job the listing predates is asked alone (once), not waited a tick for
    listed = RedisShare(client).get("cluster-a", TICK, lambda: None)
    assert listed is not None and "999999" not in listed.rows
    start = counts(log)["squeue"]
    assert allocation_end("999999") is None
    assert counts(log)["squeue"] - start == 1


def test_max_jobs_refuses_a_submission_in_one_line_and_writes_nothing(
        jobs: tuple[list[str], Path], slurm_cluster: SlurmCluster, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ids, log = jobs
    monkeypatch.setenv(GATES_ENV, str(tmp_path / "gates"))
    host = SlurmHost(env={"SLURM_CONF": str(slurm_cluster.conf)},
                     partition=slurm_cluster.partition, max_jobs=len(ids))
    bridge = bridge_for("hpc", host, LocalTransport("hpc"), root=str(tmp_path / "root"))
    start = counts(log)
    with pytest.raises(HostError) as refused:
        bridge.submit(command="true", name="over")
    assert str(refused.value) == (
        f"host 'hpc': max_jobs {len(ids)} reached ({len(ids)} jobs queued or running); wait "
        "for some to end, or raise [hosts.hpc] max_jobs if the site allows more")
    assert counts(log)["sbatch"] == start["sbatch"] and not (tmp_path / "root").exists()
    assert counts(log)["squeue"] - start["squeue"] == 1  # one count, not one per job
    roomy = bridge_for("hpc", host.model_copy(update={"max_jobs": len(ids) + 1}),
                       LocalTransport("hpc"), root=str(tmp_path / "root"))
    ids.append(roomy.submit(command="true", name="fits").job_id)  # cancelled by the fixture
    assert counts(log)["sbatch"] == start["sbatch"] + 1


def test_submissions_past_the_per_minute_limit_wait_for_their_turn(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gate.log"
    assert [wait_turn(path, 2, "hpc") for _ in range(2)] == [0.0, 0.0]
    times = [float(t) for t in path.read_text().split()]
    path.write_text(f"{times[0] - 59.5!r}\n{times[1]!r}\n")  # the oldest about to age out
    assert wait_turn(path, 2, "hpc") > 0  # waited for it, then went
    assert len(path.read_text().split()) == 2  # the aged one dropped, this one recorded
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("mainboard: host 'hpc': max_submits_per_minute 2 reached; waiting")
    assert gate_file("slurm", "login.example; rm -rf").name == "slurm-login.example__rm_-rf.log"


def test_with_the_broker_away_a_worker_asks_for_its_own_end(
        jobs: tuple[list[str], Path], redis_server: RedisServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.services import free_port

    ids, log = jobs
    monkeypatch.setenv(KIND_ENV, "slurm")  # as fleet up starts a worker there
    dead = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    monkeypatch.setattr(fleet, "_client", (os.getpid(), dead))
    direct = subprocess.run(["squeue", "-h", "-j", ids[0], "-o", "%e"], capture_output=True,
                            text=True, check=True).stdout.strip()
    start = counts(log)["squeue"]
    assert allocation_end(ids[0]) == parse_end(direct)  # no traceback, the old query
    assert counts(log)["squeue"] - start == 1


@pytest.mark.parametrize(("line", "says"), [
    ("max-jobs = 0", "hosts.hpc.max-jobs: "),
    ('max-submits-per-minute = "lots"', "hosts.hpc.max-submits-per-minute: wrong type"),
])
def test_bad_limits_are_one_line_exit_2(tmp_path: Path, line: str, says: str) -> None:
    from tests.support.fleet_helpers import cli, workspace

    ws = workspace(tmp_path / "ws", f'[hosts.hpc]\nkind = "slurm"\n{line}\n')
    done = cli(ws, "fleet", "up", "--on", "hpc")
    assert done.returncode == 2 and done.stdout == ""
    (err,) = done.stderr.splitlines()
    assert says in err and "valid: an integer >= 1" in err
    assert not (ws / ".mainboard" / "fleet.ndjson").exists()


@pytest.mark.timeout(300)  # the fleet hosts' environment, built once per session
def test_the_keeper_holds_at_a_sites_max_jobs_with_one_line_and_never_pauses(
        jobs: tuple[list[str], Path], slurm_cluster: SlurmCluster, tmp_path: Path,
        provisioned_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from mainboard.fleet.autoscale import SCALE_TICK_ENV
    from mainboard.fleet.records import read_fleet
    from tests.support.fleet_helpers import HOST_PYTHON, cli, table, tear_down, workspace

    ids, log = jobs
    monkeypatch.setenv(GATES_ENV, str(tmp_path / "gates"))
    ws = workspace(tmp_path / "ws", table(
        "hosts.hpc", kind="slurm", partition="debug", root=str(provisioned_root),
        python=HOST_PYTHON, env={"SLURM_CONF": str(slurm_cluster.conf)},
        **{"max-jobs": len(ids)}), table(
        "fleet.pools.capped", host="hpc", queues=["t29.capped"],
        **{"min-jobs": 1, "max-jobs": 1}))
    try:
        cli(ws, "fleet", "up", "--no-flower", env={SCALE_TICK_ENV: "0.2"})
        held = wait_until(lambda: [e for e in read_fleet(ws / ".mainboard").scale
                                   if e.action == "hold"], 60, "the keeper holding")
        assert held[0].reason == (
            f"host 'hpc': max_jobs {len(ids)} reached ({len(ids)} jobs queued or running); "
            "wait for some to end, or raise [hosts.hpc] max_jobs if the site allows more")
        assert counts(log)["sbatch"] == len(ids)  # only the fixture's: nothing submitted
        assert cli(ws, "fleet", "down").returncode == 0  # the keeper ticked meanwhile
        events = read_fleet(ws / ".mainboard").scale
        keeper = [e.action for e in events[[e.action for e in events].index("start"):]]
        assert keeper == ["start", "hold", "stop"], keeper  # said once; no failure, no pause
    finally:
        tear_down(ws)
