"""Live tier: one fleet on five real hosts — local, loopback sshd, a network-namespaced
sshd that reaches the broker only through the reverse tunnel, SLURM, and the PBS
wrappers over SLURM. Each host runs a task routed to its own queue; status merges the
schedulers' view with Celery's; Flower (in headless Chromium) lists every worker;
the broker password is in no process's arguments; down leaves nothing running.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mainboard.fleet.records import read_fleet
from tests.support.brokers import passwords
from tests.support.chromium import render
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.fleet_helpers import (
    HOST_PYTHON,
    assert_nothing_left,
    broker_password,
    cli,
    config,
    nodes_of,
    probe,
    processes_matching,
    provisioned_root,  # noqa: F401 - session fixture
    ssh_host,
    status,
    table,
    tear_down,
    up_ok,
    wait_until,
    workspace,
)
from tests.support.netns import NetnsHost, free_subnet_index, make_netns_host
from tests.support.services import SlurmCluster, SshServer

pytestmark = [pytest.mark.live, pytest.mark.timeout(600)]
HOSTS = ("local", "lo", "ns", "cluster", "pbs")
NS_HOSTNAME = "mbt-fleet-ns"


@dataclass
class Fleet:
    ws: Path
    ns: NetnsHost
    slurm: SlurmCluster
    up_lines: list[str]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, sshd_server: SshServer,
          slurm_cluster: SlurmCluster, provisioned_root: Path) -> Iterator[Fleet]:  # noqa: F811
    base = tmp_path_factory.mktemp("fleet-live")
    ns = make_netns_host("fleet", free_subnet_index(), base / "ns", hostname=NS_HOSTNAME)
    assert ns.ssh is not None
    batch = {"root": str(provisioned_root), "python": HOST_PYTHON,
             "env": {"SLURM_CONF": str(slurm_cluster.conf)}}
    ws = workspace(base / "ws",
                   ssh_host("lo", sshd_server, provisioned_root),
                   # no route to any index in there: uv works from the root's warm cache
                   ssh_host("ns", ns.ssh, provisioned_root, env={"UV_OFFLINE": "1"}),
                   table("hosts.cluster", kind="slurm", partition="debug", **batch),
                   table("hosts.pbs", kind="pbs", **batch))
    try:
        lines = up_ok(ws, "--on", "local", "--on", "lo", "--on", "cluster", "--on", "pbs")
        lines += up_ok(ws, "--on", "ns")  # a second `up` adds to the running fleet
        yield Fleet(ws, ns, slurm_cluster, lines)
    finally:
        tear_down(ws, "--timeout", "20")
        ns.cleanup()


def test_up_reports_each_worker_and_its_route(fleet: Fleet) -> None:
    by_host = {line.split(":", 1)[0]: line for line in fleet.up_lines if ": worker " in line}
    assert set(by_host) == set(HOSTS)
    for name in ("lo", "ns"):
        assert "broker via tunnel" in by_host[name]
    for name in ("local", "cluster", "pbs"):
        assert "broker direct" in by_host[name]
    assert any(line.startswith("flower: http://127.0.0.1:") for line in fleet.up_lines)


@pytest.mark.parametrize("host", HOSTS)
def test_a_task_sent_to_the_hosts_queue_runs_on_that_hosts_worker(fleet: Fleet,
                                                                   host: str) -> None:
    found = probe(fleet.ws, host)
    kind = {"local": "local", "lo": "ssh", "ns": "ssh", "cluster": "slurm", "pbs": "pbs"}[host]
    assert found["host"] == host  # Flower's name: <kind>-<host>-<job id>@<machine>
    assert found["node"].partition("@")[0] == f"{kind}-{host}-{found['job_id']}"
    if host == "ns":  # it really ran inside the namespace, which has no route to our Redis
        assert found["hostname"] == NS_HOSTNAME
        no_route = fleet.ns.run([HOST_PYTHON, "-c", "import socket; socket.create_connection("
                                 "('127.0.0.1', int(__import__('sys').argv[1])), timeout=2)",
                                 str(_broker_port(fleet.ws))])
        assert no_route.returncode != 0
    if host in ("cluster", "pbs"):
        assert found["job_id"].isdigit()  # SLURM's id (the PBS wrappers run on SLURM)


def _broker_port(ws: Path) -> int:
    from mainboard.fleet.workers import broker_route
    from tests.support.fleet_helpers import config

    route = broker_route(config(ws), start=False)
    assert route is not None
    return route.port


def test_status_from_a_new_process_merges_scheduler_and_celery(fleet: Fleet) -> None:
    for host in HOSTS:
        probe(fleet.ws, host)
    rows = wait_until(lambda: (r := status(fleet.ws)) and all(
        x["online"] and (x["tasks_done"] or 0) >= 1 for x in r) and r, 60,
        "every worker online with a task done")
    by_host = {r["host"]: r for r in rows}
    assert set(by_host) == set(HOSTS)
    for host, row in by_host.items():
        assert row["state"] == "online" and row["job_state"] == "running"
        assert f"mainboard.host.{host}" in row["queues"] and "mainboard.batches" in row["queues"]
        assert row["concurrency"] == 1 and row["last_heartbeat"] is not None
    assert by_host["ns"]["broker_via"] == by_host["lo"]["broker_via"] == "tunnel"
    squeue = subprocess.run(["squeue", "-h", "-o", "%i"], env=fleet.slurm.env,
                            capture_output=True, text=True, check=True).stdout.split()
    assert by_host["cluster"]["job_id"] in squeue and by_host["pbs"]["job_id"] in squeue
    table_out = cli(fleet.ws, "fleet", "status")
    assert table_out.returncode == 0 and "HEARTBEAT" in table_out.stdout.splitlines()[0]


def test_dashboard_fleet_page_data_names_every_worker_with_its_job_and_throughput(
        fleet: Fleet) -> None:
    from mainboard.dashboard.views import Views

    views = Views(config(fleet.ws))
    try:
        data = wait_until(lambda: (d := views.fleet()) and len(d["workers"]) == len(HOSTS)
                          and all(w["tasks_per_s"] for w in d["workers"]) and d, 30,
                          "the dashboard's fleet rows with throughput")
    finally:
        views.close()
    assert data["broker"]["ok"] and {w["host"] for w in data["workers"]} == set(HOSTS)
    for row in data["workers"]:
        assert row["state"] == "online" and row["job_id"] and row["tasks_done"] >= 1
    assert {e["node"] for e in data["registry"]} >= {w["node"] for w in data["workers"]}


def test_flower_lists_the_workers_of_every_host(fleet: Fleet,
                                                tmp_path_factory: pytest.TempPathFactory,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from mainboard.services.flower import USER, Flower

    flower = Flower(fleet.ws / ".mainboard")
    current = flower.status()
    assert current.running and current.url
    nodes = [r["node"] for r in status(fleet.ws)]
    shot = tmp_path_factory.mktemp("fleet-artifacts") / "flower-fleet-workers.png"
    password = flower.secret_path.read_text().strip()
    page = render(f"{current.url}workers", auth=(USER, password), wait_for=nodes[-1],
                  screenshot=shot, timeout=60)
    kept = Path("/tmp/mainboard-test-artifacts")
    kept.mkdir(exist_ok=True)
    shutil.copy(shot, kept / shot.name)
    with capsys.disabled():
        print(f"\nfleet flower screenshot (test artifact): {kept / shot.name}")
    assert page.status == 200
    for node in nodes:
        assert node in page.html, f"{node} is not on Flower's workers page"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_broker_password_is_in_no_argv_receipt_or_job_script(fleet: Fleet) -> None:
    password = broker_password(fleet.ws)
    assert not processes_matching(*passwords(fleet.ws / ".mainboard"))  # and the worker's
    assert password not in (fleet.ws / ".mainboard" / "fleet.ndjson").read_text()
    for row in status(fleet.ws):
        assert row["node"] and password not in json.dumps(row)
    pbs = read_fleet(fleet.ws / ".mainboard").live({"pbs"})[0].job["job_id"]
    shown = subprocess.run(["qstat", "-f", str(pbs)], env=fleet.slurm.env, capture_output=True,
                           text=True, timeout=30)
    assert shown.returncode == 0 and shown.stdout.strip(), shown.stderr
    assert not any(s in shown.stdout for s in passwords(fleet.ws / ".mainboard"))
    scripts = list(Path(_root_of(fleet)).glob(".mainboard/jobs/*/job.sh"))
    assert scripts and not any(password in s.read_text() for s in scripts)
    secrets = list(Path(_root_of(fleet)).glob(".mainboard/fleet/*.broker"))
    assert secrets and all(oct(s.stat().st_mode & 0o777) == "0o600" for s in secrets)


def _root_of(fleet: Fleet) -> str:
    from tests.support.fleet_helpers import config

    return str(config(fleet.ws).host("lo").root)


def test_down_drains_one_host_then_everything_and_leaves_nothing_running(fleet: Fleet) -> None:
    from tests.support.fleet_helpers import batch_consumers

    rows = status(fleet.ws)
    assert batch_consumers(fleet.ws) > 0  # what `integrate` asks before starting local workers
    one = cli(fleet.ws, "fleet", "down", "--on", "pbs", "--timeout", "30")
    assert one.returncode == 0 and one.stdout.startswith("pbs: worker pbs-pbs-"), one.stdout
    assert {r["host"] for r in status(fleet.ws)} == set(HOSTS) - {"pbs"}
    done = cli(fleet.ws, "fleet", "down", "--timeout", "30")
    assert done.returncode == 0, done.stderr
    outcome = {line.split(":", 1)[0]: line for line in one.stdout.splitlines()
               + done.stdout.splitlines()}
    for host in HOSTS:
        assert outcome[host].endswith("completed"), outcome[host]  # drained, not killed
    assert_nothing_left(fleet.ws, nodes_of(rows))
    squeue = subprocess.run(["squeue", "-h", "-o", "%i"], env=fleet.slurm.env,
                            capture_output=True, text=True, check=True).stdout.split()
    assert not {r["job_id"] for r in rows} & set(squeue)
    assert status(fleet.ws) == [] and batch_consumers(fleet.ws) == 0
    stopped = status(fleet.ws, "--all")
    assert {r["host"] for r in stopped} == set(HOSTS) and all(r["stopped"] for r in stopped)
    assert not list(Path(_root_of(fleet)).glob(".mainboard/fleet/*.broker"))
