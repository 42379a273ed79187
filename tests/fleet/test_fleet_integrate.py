"""Live tier: an integration run completes on a fleet whose only worker sits in its own
network namespace and reaches the loopback broker only through the reverse tunnel.

``mainboard.integrate(run, workers=0)`` starts no local worker, so every batch of the run
must be executed by that namespaced worker (its Celery node carries the namespace's own
hostname, and its tasks-done counter covers every bundle of batches); ``fleet down`` then leaves
nothing running.

Integrands that live in the workspace (issue 11, part 6) run there too: before each run
``mainboard.integrate`` mirrors the workspace to the host's root (the shared provisioned
root, not the workspace), the worker imports the run's module from that copy (the module
writes a marker beside the file it was imported from), picks up an edit in the next run
(only the edited file travels), and starts a process integrand whose relative path
resolves in the copy. The no-change sync time is printed (``-s`` shows it). These tests
come first: the last one takes the fleet down.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import mainboard
from mainboard.fleet.records import read_fleet
from mainboard.fleet.sync import mirror_of, sync_fleet
from mainboard.hosts.access import Hosts
from tests.support.fleet_helpers import (
    assert_nothing_left,
    batch_consumers,
    cli,
    config,
    nodes_of,
    provisioned_root,  # noqa: F401 - session fixture
    ssh_host,
    status,
    tear_down,
    up_ok,
    wait_until,
    workspace,
)
from tests.support.integration import spec
from tests.support.netns import NetnsHost, free_subnet_index, make_netns_host
from tests.support.workspace_integrands import RUNS_DIR, assert_close, set_scale, write_files

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]
NS_HOSTNAME = "mbt-integ-ns"
ITERATIONS, BATCHES, BATCH_SIZE = 2, 4, 2_000
RUN = spec(name="fleet-ns-gauss-2d", seed=23, domain={"continuous": 2},
           integrand={"kind": "genz.gaussian", "a": [4.0, 4.0], "u": [0.45, 0.45]},
           sampler={"kind": "vegas", "bins": 16, "alpha": 0.5},
           stop={"max_samples": None, "max_iterations": ITERATIONS},
           batching={"batch_size": BATCH_SIZE, "batches_per_iteration": BATCHES})


TAG = "wsint_fleet"


@dataclass
class NsFleet:
    ws: Path
    ns: NetnsHost
    up_lines: list[str]
    root: Path


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
        yield NsFleet(ws, ns, up_ok(ws, "--on", "ns"), provisioned_root)
    finally:
        tear_down(ws, "--timeout", "20")
        ns.cleanup()


def _workspace_runs(ns_fleet: NsFleet) -> tuple[Path, Path]:
    """The workspace integrand files (idempotent): the process runs on the host's own
    interpreter, by a path relative to the synced copy. Waits for the worker to answer."""
    wait_until(lambda: batch_consumers(ns_fleet.ws) > 0, 90, "the namespaced worker online")
    (worker,) = read_fleet(ns_fleet.ws / ".mainboard").live()
    return write_files(ns_fleet.ws, TAG, worker.python, [f"procs/{TAG}_proc.py"])


def test_a_workspace_module_runs_from_the_hosts_copy_and_edits_reach_it(
        ns_fleet: NsFleet) -> None:
    ws, root = ns_fleet.ws, ns_fleet.root
    python_run, _ = _workspace_runs(ns_fleet)
    marker = Path(RUNS_DIR) / f"{TAG}_mod.ran"
    (root / marker).unlink(missing_ok=True)
    assert_close(mainboard.integrate(python_run, workers=0, config=config(ws)), 1.0)
    # imported on the host from its copy (root + the run file's folder), not from here
    assert (root / marker).read_text() == str((root / RUNS_DIR / f"{TAG}_mod.py").resolve())
    assert not (ws / marker).exists()

    start = time.perf_counter()
    (synced,) = sync_fleet(config(ws))
    took = time.perf_counter() - start
    assert synced.host == "ns" and synced.report.files == [] and synced.report.via is None
    print(f"\nno-change sync of the workspace to 'ns' over sshd: {took * 1000:.0f} ms "
          f"({synced.report.tracked} files tracked)")

    set_scale(ws, TAG, 3.0)  # same run file, same run id: only the helper module changed
    cfg = config(ws)
    with Hosts(config=cfg) as hosts:
        plan = mirror_of(cfg, hosts, read_fleet(ws / ".mainboard").live()[0]).plan()
    assert plan.files == [f"{TAG}_help.py"], plan.files  # the delta: one file travels
    assert_close(mainboard.integrate(python_run, workers=0, config=cfg), 3.0)
    assert (root / f"{TAG}_help.py").read_text() == "SCALE = 3.0\n"


def test_a_process_integrand_in_the_workspace_runs_on_the_host(ns_fleet: NsFleet) -> None:
    ws, root = ns_fleet.ws, ns_fleet.root
    _, process_run = _workspace_runs(ns_fleet)
    marker = root / "procs" / f"{TAG}_proc.ran"
    marker.unlink(missing_ok=True)
    result = mainboard.integrate(process_run, workers=0, config=config(ws))
    assert_close(result, 1.0)
    assert result.exact == 1.0
    assert marker.read_text() == str((root / "procs" / f"{TAG}_proc.py").resolve())
    assert not (ws / "procs" / f"{TAG}_proc.ran").exists()


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
    # the only worker anywhere is the namespaced one: it executed every batch (in bundles:
    # at least one task per iteration)
    done = wait_until(lambda: (r := status(ws)) and (r[0]["tasks_done"] or 0) - before
                      >= ITERATIONS and r, 30, "tasks-done of the namespaced worker")
    assert done[0]["node"] == row["node"]
    # what the remote worker shipped about the run (spans, host, kind, scheduler job) came
    # back through the tunnelled broker: the run page's worker table names it
    (shipped,) = wait_until(lambda: mainboard.run(result.run_id, config(ws)).workers(), 10,
                            "the remote worker's spans")
    assert (shipped.worker, shipped.host, shipped.kind) == (row["node"], "ns", "ssh")
    assert shipped.job_id and f"-{shipped.job_id}@" in row["node"]
    assert shipped.batches >= ITERATIONS * BATCHES and shipped.samples_per_s > 0

    down = cli(ws, "fleet", "down", "--timeout", "30")
    assert down.returncode == 0, down.stderr
    assert down.stdout.startswith("ns: worker ssh-ns-") and down.stdout.strip().endswith(
        "completed"), down.stdout
    assert_nothing_left(ws, nodes_of(rows))
    assert status(ws) == []
