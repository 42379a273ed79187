"""Issue 29 item 4, done when: the Sentinel-managed master SIGKILLed mid-run while the run
goes on 2 local workers AND a fleet worker on an ssh host, with the fleet keeper holding
that worker's pool and Flower up. The run ends with the undisturbed numbers to the last
bit and no traceback in any log; the ssh worker sampled batches before the failover and
after it; Flower answers; the keeper lives on and its next looks succeed.

Real processes throughout: a master, a replica and three sentinels (redis-server,
``tests/sentinels.py``), the session's sshd on loopback as the ssh host, ``mainboard fleet
up`` (worker, keeper, Flower) and ``mainboard integrate`` in subprocesses. The ssh worker
is given the sentinels' addresses, never a tunnel (a tunnel holds one port; the master
moves): it follows the failover itself, as every other client does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mainboard.fleet.autoscale import SCALE_TICK_ENV
from mainboard.fleet.control import fleet_up
from mainboard.fleet.keeperclient import keeper_pid
from mainboard.fleet.launch import BrokerRoute, UpOptions
from mainboard.fleet.records import fleet_receipts, read_fleet
from mainboard.fleet.sentinel_route import VIA
from mainboard.receipts import WorkerStarted, WorkerTunnel
from mainboard.redisclient import redis_client
from mainboard.runs.spans import read_spans
from mainboard.services.flower import USER, Flower
from mainboard.statedir import fleet_dir
from tests.support.fleet_helpers import (
    batch_consumers,
    cli,
    config,
    probe,
    provisioned_root,  # noqa: F401 - session fixture
    ssh_host,
    table,
    tear_down,
    up_ok,
    wait_keeper_looks,
    wait_until,
    workspace,
)
from tests.support.integration import toml
from tests.support.netns import free_subnet_index, make_netns_host
from tests.support.outage import (
    FLEET_SHAPE,
    FLEET_TABLES,
    numbers,
    reference,
    run_id_of,
    sentinel_broker,
    start,
    wait_iteration,
    workspace_run,
)
from tests.support.scrape import fetch
from tests.support.sentinels import SentinelSet, start_sentinel_set
from tests.support.services import SshServer

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]
ENV = {SCALE_TICK_ENV: "0.5"}  # the keeper's looks come often enough to wait on two


@dataclass
class Fleet:
    ws: Path
    found: SentinelSet
    worker: WorkerStarted
    up_lines: list[str]


@pytest.fixture
def fleet(tmp_path: Path, sshd_server: SshServer,
          provisioned_root: Path) -> Iterator[Fleet]:  # noqa: F811
    """A Sentinel-managed set, and a workspace on it whose one pool is an ssh host."""
    found = start_sentinel_set(tmp_path / "sentinel")
    ws = workspace(tmp_path / "ws", sentinel_broker(found.entries, found.master),
                   ssh_host("box", sshd_server, provisioned_root),
                   table("fleet.pools.remote", host="box", jobs=1, min_jobs=1, max_jobs=1))
    try:
        lines = up_ok(ws, env=ENV)
        (worker,) = read_fleet(ws / ".mainboard").live()
        yield Fleet(ws, found, worker, lines)
    finally:
        try:
            tear_down(ws, "--timeout", "20")
        finally:
            found.stop()


def _tracebacks(path: Path, *, until: str | None = None) -> bool:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "Traceback" in (text.split(until)[0] if until else text)


def test_a_master_killed_mid_run_on_local_and_ssh_workers_changes_nothing(fleet: Fleet) -> None:
    ws, found, worker = fleet.ws, fleet.found, fleet.worker
    state = ws / ".mainboard"
    assert worker.broker_via == VIA and worker.tunnel_port is None, worker
    assert any(line.startswith("box: worker ") and f"broker via {VIA}" in line
               for line in fleet.up_lines), fleet.up_lines
    wait_until(lambda: batch_consumers(ws) > 0, 90, "the ssh worker online")
    keeper = keeper_pid(state)
    assert keeper, "fleet up started no keeper for the pool"

    run = workspace_run(ws, **FLEET_TABLES)
    (ws / "run.toml").write_text(toml(run))
    expected, run_id = reference(run), run_id_of(run)
    began = time.monotonic()
    proc = start(ws, "integrate", "run.toml", "--workers", "2", "--json")
    try:
        wait_iteration(state, run_id, proc)
        killed_at = time.time()
        found.kill(found.master_port())
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - began
    assert proc.returncode == 0, err
    assert numbers(json.loads(out)) == (expected.estimate, expected.error, *FLEET_SHAPE)
    assert "Traceback" not in err

    # the ssh worker sampled batches before the master's SIGKILL and after the failover
    node = f"{worker.node}@"
    client = redis_client(found.url, socket_timeout=5)
    try:
        spans = read_spans(client, run_id)
    finally:
        client.close()
    mine = [s for s in spans if s.worker.startswith(node)]
    assert any(not s.worker.startswith(node) for s in spans), "no local worker took part"
    assert any(s.start < killed_at for s in mine), f"no span of {node} before the failover"
    assert any(s.start > killed_at for s in mine), f"no span of {node} after the failover"

    # Flower answers after the failover, and lists the ssh worker
    shown = Flower(state).status()
    assert shown.running and shown.url, shown
    password = Path(shown.secret_file).read_text().strip()
    wait_until(lambda: (r := fetch(f"{shown.url}api/workers?refresh=1", (USER, password)))[0]
               == 200 and node in r[1], 60, "Flower's API answering with the ssh worker")

    # the keeper is the same process, and its looks after the failover succeed
    log = fleet_dir(state) / "keeper.log"
    seen = log.stat().st_size if log.exists() else 0
    wait_keeper_looks(ws, 2)
    assert keeper_pid(state) == keeper, "the keeper was replaced"
    after = log.read_text(errors="replace")[seen:] if log.exists() else ""
    assert "tick failed" not in after, after

    # no traceback anywhere: coordinator (above), local workers, keeper, Flower, ssh worker
    logs = list(state.rglob("*.log"))
    assert {"flower.log", "keeper.log"} <= {p.name for p in logs}, logs
    for path in logs:  # a local worker's: up to its own shutdown after the run
        assert not _tracebacks(path, until="Warm shutdown"), path
    job_dir = Path(worker.job["job_dir"])
    assert (job_dir / "stdout").exists() or (job_dir / "stderr").exists(), job_dir
    for name in ("stdout", "stderr"):
        assert not _tracebacks(job_dir / name), job_dir / name
    print(f"failover with an ssh worker: run {took:.1f} s", flush=True)

    # a warm start on the same host after the failover: the sentinels, no tunnel either
    timings: dict[str, dict[str, float]] = {}
    report = fleet_up(config(ws), ["box"], UpOptions(), flower=False, timings=timings)
    assert not report.failed, report.failed
    assert "connect" not in timings["box"] and "route" not in timings["box"], timings
    assert [w.broker_via for w in report.started] == [VIA]
    assert probe(ws, "box")["host"]  # a worker on the host answers on its own queue


def test_a_sentinel_route_is_never_a_loopback_one_to_tunnel() -> None:
    url = "sentinel://127.0.0.1:26379,127.0.0.1:26380/0?master=mainboard"
    assert BrokerRoute(url).sentinel and not BrokerRoute(url).loopback
    assert BrokerRoute("redis://127.0.0.1:6379/0").loopback
    assert not BrokerRoute("redis://127.0.0.1:6379/0").sentinel


def test_an_ssh_host_that_cannot_reach_the_sentinels_is_refused_in_one_line(
        tmp_path: Path, provisioned_root: Path) -> None:  # noqa: F811
    """A host in its own network namespace does not reach this machine's loopback: its
    worker would be refused by the sentinels' addresses, and a tunnel is no answer."""
    found = start_sentinel_set(tmp_path / "sentinel")
    ns = make_netns_host("sentinel", free_subnet_index(), tmp_path / "ns")
    assert ns.ssh is not None
    ws = workspace(tmp_path / "ws", sentinel_broker(found.entries, found.master),
                   ssh_host("ns", ns.ssh, provisioned_root, env={"UV_OFFLINE": "1"}))
    try:
        done = cli(ws, "fleet", "up", "--on", "ns", "--no-flower")
        assert done.returncode != 0, done.stdout
        assert "Traceback" not in done.stderr
        (line,) = [ln for ln in (done.stdout + done.stderr).splitlines() if "ns" in ln]
        assert all(entry in line for entry in found.entries), line
        assert "never tunnelled" in line and "[broker] sentinels" in line, line
        fleet = read_fleet(ws / ".mainboard")
        assert not fleet.live(), "a worker was recorded as started"
        assert not any(isinstance(p, WorkerTunnel) for p in fleet_receipts(ws / ".mainboard").read()), \
            "a tunnel was asked for a Sentinel-managed broker"
    finally:
        try:
            tear_down(ws, "--timeout", "20")
        finally:
            ns.cleanup()
            found.stop()
