"""Live tier: fleet workers on machines rented from the LOCAL SIMULATED provider.

The simulated provider (an HTTP server on loopback; a "rental" is a network namespace
with its own sshd and hostname) is driven through the real REST adapter. A rented
worker reaches the loopback broker only through the keeper's reverse tunnel. Proven
here: a task runs there; down destroys the rental; a failure in the middle of `up`
leaves no rental behind; a worker idle past its timeout loses its machine.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from mainboard.bridges.providers import owned_rentals
from mainboard.fleet.records import read_fleet
from tests.support.brokers import passwords
from tests.support.fleet_helpers import (
    HOST_PYTHON,
    assert_nothing_left,
    cli,
    kill_keeper_and_lose_starts,
    nodes_of,
    probe,
    provisioned_root,  # noqa: F401 - session fixture
    send_tasks,
    status,
    stop_broker,
    table,
    tear_down,
    up_ok,
    wait_keeper_looks,
    wait_until,
    workspace,
)
from tests.support.sim_provider import SimulatedProviderServer

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]
KEY_ENV = "MB_FLEET_SIM_KEY"


def _workspace(base: Path, sim: SimulatedProviderServer, root: Path, **host: object) -> Path:
    return workspace(
        base,
        table("providers.sim", kind="simulated", api_url=sim.url, api_key_env=KEY_ENV),
        table("hosts.gpu", kind="provider", provider="sim", gpu="SIM RTX 4090", max_usd_hr=1.0,
              root=str(root), python=host.pop("python", HOST_PYTHON),
              env={"UV_OFFLINE": "1"}))  # a rental has no route to an index here


def _listed(sim: SimulatedProviderServer) -> list[str]:
    return [r.id for r in sim.market(KEY_ENV).list_rentals()]


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def _sim_namespaces() -> set[str]:
    """The simulated provider's sandboxes on this machine now (``mbsim-<token>``)."""
    return {line.split()[0] for line in _namespaces().splitlines()
            if line.startswith("mbsim-")}


def test_rented_worker_runs_a_task_and_down_destroys_the_rental(
        tmp_path: Path, sim: SimulatedProviderServer, provisioned_root: Path) -> None:  # noqa: F811
    env = {KEY_ENV: sim.api_key}
    ws = _workspace(tmp_path / "ws", sim, provisioned_root)
    (ws / "launch_mirror.txt").write_text(str(tmp_path))
    lines = up_ok(ws, "--on", "gpu", "--no-flower", env=env)
    try:
        assert any("broker via tunnel, rental " in line for line in lines), lines
        # a fresh rental gets the workspace at launch (a pool grown mid-run has no sync before)
        assert (provisioned_root / "launch_mirror.txt").read_text() == str(tmp_path)
        found = probe(ws, "gpu")
        assert found["hostname"].startswith("sim-gpu-")  # ran on the rented machine
        rows = wait_until(lambda: (r := status(ws, env=env)) and r[0]["online"] and r, 60,
                          "the rented worker online")
        rental = rows[0]["rental_id"]
        assert rental and rows[0]["broker_via"] == "tunnel" and rows[0]["kind"] == "provider"
        sandbox = sim.sandbox(rental)
        assert sandbox["netns"] in _namespaces() and _listed(sim) == [rental]
        secrets = passwords(ws / ".mainboard")  # the coordinator's and the worker user's
        user_data = sim.user_data()
        assert '"request"' in user_data  # the launch request was kept, as user-data is
        for text in (user_data, sim.log_text()):
            assert not any(s in text for s in secrets)
    finally:
        down = tear_down(ws, "--timeout", "20", env=env)
    assert down.returncode == 0 and "gpu: worker " in down.stdout, down.stderr
    assert owned_rentals(ws / ".mainboard") == [] and _listed(sim) == []
    assert sandbox["netns"] not in _namespaces()
    assert_nothing_left(ws, nodes_of(rows))


def test_a_failure_in_the_middle_of_up_leaves_no_rental(
        tmp_path: Path, sim: SimulatedProviderServer, provisioned_root: Path) -> None:  # noqa: F811
    env = {KEY_ENV: sim.api_key}
    ws = _workspace(tmp_path / "ws", sim, provisioned_root, python="/nonexistent/python3")
    before = _sim_namespaces()  # another run's on this machine are not this test's
    done = cli(ws, "fleet", "up", "--on", "gpu", "--no-flower", env=env)
    stop_broker(ws)
    assert done.returncode == 1
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("mainboard: error: host 'gpu':"), errors
    assert "/nonexistent/python3" in errors[0]
    assert owned_rentals(ws / ".mainboard") == [] and _listed(sim) == []
    receipts = (ws / ".mainboard" / "rentals.ndjson").read_text()
    assert '"rental.created"' in receipts and '"rental.destroyed"' in receipts
    assert "setup failed" in receipts and _sim_namespaces() <= before
    assert read_fleet(ws / ".mainboard").live() == []


def test_a_worker_idle_past_its_timeout_loses_its_rental(
        tmp_path: Path, sim: SimulatedProviderServer, provisioned_root: Path) -> None:  # noqa: F811
    env = {KEY_ENV: sim.api_key}
    ws = _workspace(tmp_path / "ws", sim, provisioned_root)
    up_ok(ws, "--on", "gpu", "--no-flower", "--idle-timeout", "3s", env=env)
    try:
        stopped = wait_until(lambda: read_fleet(ws / ".mainboard").stopped, 90,
                             "the keeper stopping the idle worker")
    finally:
        tear_down(ws, "--timeout", "20", env=env)
    (reason,) = [s.reason for s in stopped.values()]
    assert reason == "idle past idle_timeout"
    assert owned_rentals(ws / ".mainboard") == [] and _listed(sim) == []
    assert "idle past idle_timeout" in (ws / ".mainboard" / "rentals.ndjson").read_text()


def test_metrics_show_a_provider_pools_spend_as_the_provider_bills_it(
        tmp_path: Path, sim: SimulatedProviderServer, provisioned_root: Path) -> None:  # noqa: F811
    """Issue 19, part 7: spend per provider pool on Flower's /metrics, checked against the
    simulation's own books (its rental record: price and start/end times)."""
    import json

    from click.testing import CliRunner

    from mainboard.cli import cli as main
    from mainboard.services.flower import USER, Flower
    from tests.support.scrape import fetch, parse, value

    env = {KEY_ENV: sim.api_key}
    ws = _workspace(tmp_path / "ws", sim, provisioned_root)
    with (ws / "mainboard.toml").open("a") as toml:
        toml.write('\n[fleet.pools.rented]\nhost = "gpu"\nqueues = ["mtr.rented"]\njobs = 1\n')
    up_ok(ws, "--pool", "rented", env=env)
    try:
        (worker,) = read_fleet(ws / ".mainboard").live()
        rental = worker.rental["rental_id"] if worker.rental else ""
        price = json.loads((sim.state / "state.json").read_text())["rentals"][rental]["dph_total"]
        flower = Flower(ws / ".mainboard").status()
        auth = (USER, Path(flower.secret_file).read_text().strip())
        assert fetch(f"{flower.url}metrics")[0] == 401

        def scrape() -> dict:
            code, text = fetch(f"{flower.url}metrics", auth)
            assert code == 200, text
            return parse(text)

        live = wait_until(lambda: (s := scrape()) and value(
            s, "mainboard_workers", pool="rented", state="idle") == 1 and s, 60,
            "the rented worker online and idle")
        assert value(live, "mainboard_spend_usd_per_hour", pool="rented") == price > 0
        assert value(live, "mainboard_allocations_submitted_total", pool="rented") == 1
        assert 0 < value(live, "mainboard_spend_usd_total", pool="rented") < price  # < 1 h
    finally:
        down = tear_down(ws, "--timeout", "20", env=env)
    assert down.returncode == 0, down.stderr
    billed = json.loads((sim.state / "state.json").read_text())["rentals"][rental]
    assert billed["end"], billed  # destroyed: the clock stopped
    owed = billed["dph_total"] * (billed["end"] - billed["start"]) / 3600
    shown = CliRunner().invoke(main, ["--config", str(ws / "mainboard.toml"), "metrics",
                                      "--no-fleet"])
    assert shown.exit_code == 0, shown.output
    after = parse(shown.output)
    assert value(after, "mainboard_spend_usd_per_hour", pool="rented") == 0
    spent = value(after, "mainboard_spend_usd_total", pool="rented")
    # receipts are written just after the provider answers: a few seconds' worth at most
    assert abs(spent - owed) <= price * 5 / 3600, (spent, owed)


def test_a_killed_controller_adopts_its_rental_and_destroys_an_unknown_one(
        tmp_path: Path, sim: SimulatedProviderServer, provisioned_root: Path) -> None:  # noqa: F811
    """The provider third of tests/fleet/test_fleet_reconcile.py: the keeper SIGKILLed, the
    worker's start receipt lost; `fleet status` finds the rental by its label's owner tag
    and adopts it (same worker id, same rental), destroys a rental carrying the tag that
    no receipt knows, and the restarted keeper rents nothing more."""
    from mainboard.fleet.autoscale import SCALE_TICK_ENV
    from mainboard.fleet.records import owner_prefix

    env = {KEY_ENV: sim.api_key, SCALE_TICK_ENV: "0.2"}
    ws = _workspace(tmp_path / "ws", sim, provisioned_root)
    with (ws / "mainboard.toml").open("a") as toml:
        toml.write(table("fleet.pools.gpus", host="gpu", queues=["t19r.gpu"], jobs=1))
    try:
        up_ok(ws, "--no-flower", env=env)
        prefix = owner_prefix(ws / ".mainboard")
        (worker,) = read_fleet(ws / ".mainboard").live()
        assert kill_keeper_and_lose_starts(ws) == [worker.worker_id]
        market = sim.market(KEY_ENV)
        stray = market.rent(market.cheapest().id, ssh_public_key=_public_key(tmp_path),
                            label=f"mainboard-gpu-{prefix}beef00")
        done = cli(ws, "fleet", "status", "--json", env=env)
        assert done.returncode == 0, done.stderr
        (row,) = json.loads(done.stdout)
        assert (row["worker_id"], row["rental_id"]) == (worker.worker_id,
                                                        worker.rental["rental_id"])
        assert f"fleet: adopted worker {worker.worker_id}" in done.stderr, done.stderr
        assert f"cleaned sim: rental {stray.id} (its worker never started)" in done.stderr
        wait_keeper_looks(ws, 10)  # nothing submitted over 10 looks of the restarted keeper
        state = read_fleet(ws / ".mainboard")
        assert [w.worker_id for w in state.live()] == [worker.worker_id]
        assert not [e for e in state.scale if e.action == "submit"]
        books = json.loads((sim.state / "state.json").read_text())["rentals"].values()
        ours = sorted(str(r["id"]) for r in books if prefix in r["label"])
        assert ours == sorted([worker.rental["rental_id"], stray.id])  # one rent, ever
        assert _listed(sim) == [worker.rental["rental_id"]]
    finally:
        down = tear_down(ws, "--timeout", "20", env=env)
    assert down.returncode == 0, down.stderr
    assert _listed(sim) == []


def _public_key(tmp_path: Path) -> str:
    from mainboard.hosts.rentals import rental_key

    return rental_key(tmp_path / "stray-key")[1]


def test_a_provider_pool_stays_within_its_price_limits(
        tmp_path: Path, sim: SimulatedProviderServer, provisioned_root: Path) -> None:  # noqa: F811
    """`mix`: offers of $0.40, $0.80 and $1.60/h (each one machine), host ceiling $2/h,
    pool max_usd_hr 1.5, three tasks that keep their machines busy until the hold is recorded
    (so the third waits for it, whatever the load): the pool rents the $0.40 one, then the $0.80 one
    ($1.20/h, the prices recorded in the rental receipts), then holds with a line naming
    max_usd_hr and the $1.60 offer; judged on the host's $2/h ceiling it would rent none.
    `broke`: budget_usd 0.25 and a 5-minute walltime (one $3.60 allocation may cost
    $0.30): nothing is ever rented, the hold line names budget_usd."""
    from mainboard.bridges.providers.lifecycle import rental_receipts
    from mainboard.fleet.autoscale import SCALE_TICK_ENV
    from mainboard.receipts import RentalCreated

    env = {KEY_ENV: sim.api_key, SCALE_TICK_ENV: "0.3"}
    ws = workspace(
        tmp_path / "ws",
        table("providers.sim", kind="simulated", api_url=sim.url, api_key_env=KEY_ENV),
        table("hosts.h200", kind="provider", provider="sim", gpu="SIM H200", max_usd_hr=4.0,
              root=str(provisioned_root), python=HOST_PYTHON, env={"UV_OFFLINE": "1"}),
        table("hosts.any", kind="provider", provider="sim", max_usd_hr=2.0,
              root=str(provisioned_root), python=HOST_PYTHON, env={"UV_OFFLINE": "1"}),
        table("fleet.pools.mix", host="any", queues=["t19p.mix"], max_jobs=3, backlog=3,
              max_usd_hr=1.5, idle_timeout=2),
        table("fleet.pools.broke", host="h200", queues=["t19p.broke"], max_jobs=2,
              budget_usd=0.25, walltime="5m", retire_before="1m"))
    most = 0
    sim.exclusive(True)
    try:
        up_ok(ws, "--no-flower", env=env)
        send_tasks(ws, "t19p.broke", 1)[0].app.close()
        release = tmp_path / "release"  # the tasks hold their machines until the hold is seen
        results = send_tasks(ws, "t19p.mix", 3, sleep_s=120.0, until_path=release)
        try:
            while not all(r.ready() for r in results):
                if not release.exists() and any(
                        e.action == "hold" and "max_usd_hr" in e.reason
                        for e in read_fleet(ws / ".mainboard").scale if e.pool == "mix"):
                    release.touch()
                most = max(most, len(_listed(sim)))
                assert most <= 2, "a third machine past max_usd_hr 1.5"
                time.sleep(0.5)
            ran = [r.get() for r in results]
        finally:
            results[0].app.close()
    finally:
        down = tear_down(ws, "--timeout", "20", env=env)
        sim.exclusive(False)
    assert down.returncode == 0, down.stderr
    assert most == 2 and len({r["task_id"] for r in ran}) == 3
    rented = [p.usd_hr for p in rental_receipts(ws / ".mainboard").read()
              if isinstance(p, RentalCreated)]
    # the $0.40 one, then the $0.80 one; after the release, an idle machine retired past
    # idle_timeout may be rented again, but never the $1.60 offer
    assert rented[:2] == [0.40, 0.80] and set(rented) <= {0.40, 0.80}, rented
    scale = read_fleet(ws / ".mainboard").scale
    mix = [e for e in scale if e.pool == "mix"]
    assert any(e.action == "hold" and e.reason.endswith(
        "max_usd_hr 1.5: 2 allocation(s) rented at $1.20/h, the next offer costs $1.60/h")
        for e in mix), [e.reason for e in mix]
    broke = [e for e in scale if e.pool == "broke"]
    assert not [e for e in broke if e.action == "submit"]
    assert any(e.action == "hold" and "budget_usd 0.25" in e.reason for e in broke), broke
    assert _listed(sim) == []
