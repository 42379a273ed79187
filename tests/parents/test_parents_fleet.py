"""Live tier: a 3-child integration campaign, a 6-point scan and a 12-trial tuning study
(2 at a time) on a fleet whose only worker is an ssh host (a real sshd on loopback, the
worker started by ``fleet up`` through paramiko).

With ``--workers 0`` (``workers=0``) no local worker starts, so every batch of every child
run is executed by the ssh host's worker: its tasks-done counter grows by at least the
number of batches; the campaign's total is the children's sum with its error propagated.
Budgets are one to four batches per child.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from mainboard.fleet.prepare import PREPARE
from mainboard.integrators.spec_parents import parse_parent
from mainboard.tasks.runner import integrate as integrate_parent
from tests.support.fleet_helpers import (
    batch_consumers,
    cli,
    config,
    provisioned_root,  # noqa: F401 - session fixture
    ssh_host,
    tear_down,
    up_ok,
    wait_until,
    workspace,
)
from tests.support.services import SshServer

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]
BATCH = 4000
CHILD = """seed = {seed}
[domain]
continuous = 2
[integrand]
kind = "genz.gaussian"
a = [{a}, {a}]
u = [0.5, 0.5]
[sampler]
kind = "{sampler}"
[stop]
max_samples = 4000
[batching]
batch_size = 4000
batches_per_iteration = 1
fuse = true
"""
CAMPAIGN = """name = "fleet-campaign"
[campaign]
max_active_runs = 1
min_samples_per_child = 4000
step_samples = 4000
stop = { max_total_samples = 16000 }
[[campaign.children]]
name = "wide"
coefficient = 1.0
run = "wide.toml"
[[campaign.children]]
name = "narrow"
coefficient = 0.5
run = "narrow.toml"
[[campaign.children]]
name = "flat"
coefficient = -2.0
run = "flat.toml"
"""


def tasks_done(ws: Path) -> dict[str, int]:
    """{node: tasks done} of every worker that beats on the workspace's broker (the
    registry in Redis: no ssh round trip; counted before a task's result is stored)."""
    from mainboard import keys
    from mainboard.fleet.workers import broker_route, registry

    route = broker_route(config(ws), start=False)
    assert route is not None
    with registry(route) as client:
        return {n: int(client.hget(keys.worker(n), "tasks_done") or 0)
                for n in client.zrange(keys.workers_index(), 0, -1)}


@pytest.fixture(scope="module")
def ssh_fleet(tmp_path_factory: pytest.TempPathFactory, sshd_server: SshServer,
              provisioned_root: Path) -> Iterator[Path]:  # noqa: F811
    """A workspace whose fleet is one worker on the loopback sshd host ``lo``."""
    ws = workspace(tmp_path_factory.mktemp("parents-fleet") / "ws",
                   ssh_host("lo", sshd_server, provisioned_root))
    try:
        up_ok(ws, "--on", "lo")
        yield ws
    finally:
        tear_down(ws, "--timeout", "20")


def test_a_3_child_campaign_runs_on_an_ssh_fleet_host(ssh_fleet: Path) -> None:
    ws = ssh_fleet
    for name, a, sampler, seed in (("wide", 2.0, "vegas", 1), ("narrow", 6.0, "vegas", 2),
                                   ("flat", 3.0, "naive", 3)):
        (ws / f"{name}.toml").write_text(f'name = "{name}"\n'
                                         + CHILD.format(seed=seed, a=a, sampler=sampler))
    (ws / "campaign.toml").write_text(CAMPAIGN)
    wait_until(lambda: batch_consumers(ws) == 1, 90, "the ssh worker online")
    (node,) = tasks_done(ws)  # the only worker on the broker: the ssh host's
    assert node.startswith("ssh-lo-"), node
    before = tasks_done(ws)[node]

    done = cli(ws, "integrate", "campaign.toml", "--workers", "0", "--json", timeout=240)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["kind"] == "campaign" and got["status"] == "finished"
    by = {r["label"]: r for r in got["rows"]}
    assert set(by) == {"wide", "narrow", "flat"}
    assert sum(r["samples"] for r in by.values()) == 16_000
    # naive, coefficient -2: the most variance, so the step after the first round
    assert (by["flat"]["samples"], by["wide"]["samples"], by["narrow"]["samples"]) == \
        (8000, 4000, 4000)
    coeff = {"wide": 1.0, "narrow": 0.5, "flat": -2.0}
    total = got["total"]
    assert total["estimate"] == pytest.approx(
        sum(c * by[n]["estimate"] for n, c in coeff.items()), rel=1e-12)
    assert total["error"] == pytest.approx(
        math.sqrt(sum((c * by[n]["error"]) ** 2 for n, c in coeff.items())), rel=1e-12)
    exact = {n: (math.sqrt(math.pi) / a * math.erf(a / 2)) ** 2
             for n, a in (("wide", 2.0), ("narrow", 6.0), ("flat", 3.0))}
    truth = sum(c * exact[n] for n, c in coeff.items())
    assert abs(total["estimate"] - truth) < 5 * total["error"]

    # every batch ran there (counted as the task ends, a moment after its result is stored)
    wait_until(lambda: tasks_done(ws)[node] - before >= 16_000 // BATCH, 30, "batches counted")


TINY = {"name": "tiny", "seed": 5, "domain": {"continuous": 2},
        "integrand": {"kind": "genz.gaussian", "a": [4.0, 4.0], "u": [0.5, 0.5]},
        "sampler": {"kind": "vegas", "bins": 8}, "stop": {"max_samples": 1000},
        "batching": {"batch_size": 1000, "batches_per_iteration": 1, "fuse": True}}


def test_a_6_point_scan_and_a_12_trial_study_run_on_the_ssh_fleet_host(ssh_fleet: Path) -> None:
    ws = ssh_fleet
    wait_until(lambda: batch_consumers(ws) == 1, 90, "the ssh worker online")
    (node,) = tasks_done(ws)
    before = tasks_done(ws)[node]
    scan = parse_parent({"name": "fleet-scan", "child": TINY, "scan": {
        "max_concurrent_runs": 2, "parameters": [
            {"name": "integrand.u", "values": [[0.3, 0.3], [0.5, 0.5], [0.7, 0.7]]},
            {"name": "sampler.alpha", "values": [0.0, 1.0]}]}})
    tune = parse_parent({"name": "fleet-tune", "child": TINY, "tune": {
        "optimizer": {"algorithm": "random", "seed": 3, "max_trials": 12},
        "objective": {"metric": "relative_error"}, "max_concurrent_trials": 2,
        "parameters": [{"kind": "integer", "name": "sampler.bins", "min": 2, "max": 32}]}})
    cfg = config(ws)
    scanned = integrate_parent(scan, 0, config=cfg, prepare=PREPARE)
    tuned = integrate_parent(tune, 0, config=cfg, prepare=PREPARE)
    assert [r["status"] for r in scanned["rows"]] == ["finished"] * 6
    assert [r["status"] for r in tuned["rows"]] == ["finished"] * 12
    assert all(r["samples"] == 1000 for r in scanned["rows"] + tuned["rows"])
    assert tuned["best"]["objective"] == min(r["objective"] for r in tuned["rows"])
    wait_until(lambda: tasks_done(ws)[node] - before >= 18, 30, "every child's batch counted")
