"""A TLS fleet: the embedded broker on rediss:// only, workers on a local host, a loopback
sshd host (through the reverse tunnel, the CA shipped to the host) and SLURM, all as the
broker's worker user, run an integration to the exact in-process numbers. No password
in ``ps``, in ``scontrol show job -dd``, in the batch script SLURM stored, in the job
scripts or the receipts; ``ACL LOG`` stays empty.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from mainboard.fleet.records import read_fleet
from mainboard.integrators.driver import integrate_local
from mainboard.services.broker import EmbeddedBroker
from mainboard.tasks.workers import WORKER_MAIN
from tests.support.brokers import acl_denials, passwords
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.fleet_helpers import (
    HOST_PYTHON,
    cli,
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
from tests.support.integration import GAUSS_4D, spec, subprocess_env, toml
from tests.support.services import SlurmCluster, SshServer

pytestmark = [pytest.mark.live, pytest.mark.timeout(600)]
RUN = spec(GAUSS_4D, name="tls-fleet", stop={"max_samples": 80_000})


@dataclass
class TlsFleet:
    ws: Path
    slurm: SlurmCluster
    root: Path


@pytest.fixture(scope="module")
def tls_fleet(tmp_path_factory: pytest.TempPathFactory, sshd_server: SshServer,
              slurm_cluster: SlurmCluster, provisioned_root: Path  # noqa: F811
              ) -> Iterator[TlsFleet]:
    base = tmp_path_factory.mktemp("fleet-tls")
    ws = workspace(base / "ws", table("broker", tls=True),
                   ssh_host("lo", sshd_server, provisioned_root),
                   table("hosts.cluster", kind="slurm", partition="debug",
                         root=str(provisioned_root), python=HOST_PYTHON,
                         env={"SLURM_CONF": str(slurm_cluster.conf)}))
    try:
        up_ok(ws, "--on", "local", "--on", "lo", "--on", "cluster", "--no-flower")
        wait_until(lambda: (rows := status(ws)) and len(rows) == 3
                   and all(r["online"] for r in rows), 120, "three TLS workers online")
        yield TlsFleet(ws, slurm_cluster, provisioned_root)
    finally:
        tear_down(ws, "--timeout", "20")


def test_a_tls_fleet_runs_an_integration_as_the_worker_user(tls_fleet: TlsFleet) -> None:
    ws = tls_fleet.ws
    (ws / "run.toml").write_text(toml(RUN))
    done = cli(ws, "integrate", "run.toml", "--workers", "0", "--json", timeout=240,
               env=subprocess_env())
    assert done.returncode == 0, done.stderr[-2000:]
    got, expected = json.loads(done.stdout), integrate_local(RUN)
    assert (got["estimate"], got["error"], got["samples"]) == \
        (expected.estimate, expected.error, 80_000)
    broker = EmbeddedBroker(ws / ".mainboard")
    assert broker.url().startswith("rediss://coordinator:") and acl_denials(broker) == []
    with redis.Redis.from_url(broker.url(), decode_responses=True) as admin:
        users = [c["user"] for c in admin.client_list()]
    assert users.count("worker") >= 3, users  # every host's worker, none as coordinator
    started = {w.host: w for w in read_fleet(ws / ".mainboard").live()}
    assert started["lo"].broker_via == "tunnel" and started["local"].broker_via == "direct"
    shipped = Path(started["lo"].secret_path.removesuffix(".broker") + ".ca.crt")
    ca = (ws / ".mainboard" / "redis" / "tls" / "ca.crt").read_bytes()
    assert shipped.read_bytes() == ca  # the CA the ssh host's worker verifies against


def test_no_password_in_ps_scontrol_the_batch_script_or_the_receipts(
        tls_fleet: TlsFleet) -> None:
    ws, secrets = tls_fleet.ws, passwords(tls_fleet.ws / ".mainboard")
    job = read_fleet(ws / ".mainboard").live({"cluster"})[0].job["job_id"]
    env = tls_fleet.slurm.env
    shown = subprocess.run(["scontrol", "show", "job", "-dd", str(job)], env=env,
                           capture_output=True, text=True, timeout=30)
    script = subprocess.run(["scontrol", "write", "batch_script", str(job), "-"], env=env,
                            capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0 and f"JobId={job}" in shown.stdout, shown.stderr
    assert script.returncode == 0 and WORKER_MAIN in script.stdout, script.stderr
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert WORKER_MAIN in ps
    texts = [shown.stdout, script.stdout, ps, (ws / ".mainboard" / "fleet.ndjson").read_text(),
             *(p.read_text() for p in tls_fleet.root.glob(".mainboard/jobs/*/job.sh"))]
    for text in texts:
        assert not any(s in text for s in secrets)
    assert not processes_matching(*secrets)
    files = list(tls_fleet.root.glob(".mainboard/fleet/*.broker"))
    assert files and all(oct(f.stat().st_mode & 0o777) == "0o600" for f in files)
