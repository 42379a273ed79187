"""Live tier: an integration run completes on a fleet whose only worker sits in its own
network namespace and reaches the loopback broker only through the reverse tunnel.

``mainboard.integrate(run, workers=0)`` starts no local worker, so every batch of the run
must be executed by that namespaced worker (its Celery node carries the namespace's own
hostname, and its tasks-done counter covers every batch); ``fleet down`` then leaves
nothing running.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fleet_helpers import (
    assert_nothing_left,
    cli,
    config,
    nodes_of,
    provisioned_root,  # noqa: F401 - session fixture
    ssh_host,
    status,
    stop_broker,
    up_ok,
    wait_until,
    workspace,
)
from tests.integration import spec
from tests.netns import NetnsHost, free_subnet_index, make_netns_host

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]
NS_HOSTNAME = "mbt-integ-ns"
ITERATIONS, BATCHES, BATCH_SIZE = 2, 4, 2_000
RUN = spec(name="fleet-ns-gauss-2d", seed=23, domain={"continuous": 2},
           integrand={"kind": "genz.gaussian", "a": [4.0, 4.0], "u": [0.45, 0.45]},
           sampler={"kind": "vegas", "bins": 16, "alpha": 0.5},
           stop={"max_samples": None, "max_iterations": ITERATIONS},
           batching={"batch_size": BATCH_SIZE, "batches_per_iteration": BATCHES})


@dataclass
class NsFleet:
    ws: Path
    ns: NetnsHost
    up_lines: list[str]


@pytest.fixture(scope="module")
def ns_fleet(tmp_path_factory: pytest.TempPathFactory,
             provisioned_root: Path) -> Iterator[NsFleet]:  # noqa: F811
    """A fleet of exactly one worker: the namespaced ssh host (no local worker)."""
    base = tmp_path_factory.mktemp("fleet-integrate")
    ns = make_netns_host("integ", free_subnet_index(), base / "ns", hostname=NS_HOSTNAME)
    assert ns.ssh is not None
    # no route to any index in there: uv works from the shared root's warm cache
    ws = workspace(base / "ws", ssh_host("ns", ns.ssh, provisioned_root, env={"UV_OFFLINE": "1"}))
    try:
        yield NsFleet(ws, ns, up_ok(ws, "--on", "ns"))
    finally:
        cli(ws, "fleet", "down", "--timeout", "20")
        stop_broker(ws)
        ns.cleanup()


def test_an_integration_run_completes_on_the_namespaced_worker(ns_fleet: NsFleet) -> None:
    import mainboard

    ws = ns_fleet.ws
    assert any(line.startswith("ns: worker ") and "broker via tunnel" in line
               for line in ns_fleet.up_lines), ns_fleet.up_lines
    rows = wait_until(lambda: (r := status(ws)) and all(x["online"] for x in r) and r, 90,
                      "the namespaced worker online")
    assert [r["host"] for r in rows] == ["ns"]
    (row,) = rows
    assert "mainboard.batches" in row["queues"] and row["broker_via"] == "tunnel"
    assert row["node"].endswith(f"@{NS_HOSTNAME}")  # Celery's %h: the namespace's hostname
    before = row["tasks_done"] or 0

    result = mainboard.integrate(RUN, workers=0, config=config(ws))

    assert result.iterations == ITERATIONS and result.samples == ITERATIONS * BATCHES * BATCH_SIZE
    assert result.nan_count == 0 and result.exact is not None and result.error > 0
    assert abs(result.estimate - result.exact) < 5 * result.error, result
    # the only worker anywhere is the namespaced one: it executed every batch
    done = wait_until(lambda: (r := status(ws)) and (r[0]["tasks_done"] or 0) - before
                      >= ITERATIONS * BATCHES and r, 30, "tasks-done of the namespaced worker")
    assert done[0]["node"] == row["node"]

    down = cli(ws, "fleet", "down", "--timeout", "30")
    assert down.returncode == 0, down.stderr
    assert down.stdout.startswith("ns: worker ssh-ns-") and down.stdout.strip().endswith(
        "completed"), down.stdout
    assert_nothing_left(ws, nodes_of(rows))
    assert status(ws) == []
