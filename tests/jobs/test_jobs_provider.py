"""Live tier: jobs on a ``kind = "provider"`` host, rented from the LOCAL SIMULATED provider.

The simulated provider (a loopback HTTP server; a "rental" is a network namespace with
its own sshd and hostname) is driven through the real REST adapter. Proven here: a
submit rents a machine (recorded in rentals.ndjson), a second submit reuses it, the
jobs run there (its hostname), wait/logs/pull/cancel work, asking about jobs never
rents, and a monitor pass destroys the rental once no job is owed anything; with
``[python.deps]`` the job's submit builds the environment on the rental and the job runs in it. With a fleet
worker's rental on the same host, jobs rent their own machine, their outputs come back
before it is released, and the fleet's rental keeps running.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mainboard.board import Board
from mainboard.bridges.jobstate import JobState
from mainboard.bridges.providers import owned_rentals
from mainboard.bridges.providers.bridge import known_hosts_for, rental_transport
from mainboard.bridges.providers.lifecycle import rental_receipts
from mainboard.bridges.provision import env_receipts, provision
from mainboard.bridges.provision_driver import tools_dir
from mainboard.bridges.transport import LocalTransport
from mainboard.config import ProviderHost
from mainboard.errors import HostError, ProviderError
from mainboard.fleet.provider import fleet_guard
from mainboard.hosts.leases import LEASES
from mainboard.hosts.rentals import adapter, rent_cheapest, rental_key
from mainboard.jobs.job import Job, store_of
from mainboard.jobs.monitor import monitor_pass
from mainboard.receipts import (
    EnvProvisioned,
    JobPulled,
    Receipts,
    RentalCreated,
    RentalDestroyed,
)
from tests.support.jobs_workspace import provider_workspace
from tests.support.sim_provider import SimulatedProviderServer
from tests.support.workspace import run_cli

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]
KEY_ENV = "MB_JOBS_SIM_KEY"


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.fixture(autouse=True)
def _key(sim: SimulatedProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider's API key where the workspace's ``api_key_env`` names it."""
    monkeypatch.setenv(KEY_ENV, sim.api_key)


def _config(tmp_path: Path, sim: SimulatedProviderServer) -> Path:
    return provider_workspace(tmp_path, sim, KEY_ENV, root=str(tmp_path / "rented root"))


def test_jobs_on_a_rented_machine_then_the_monitor_releases_it(
        tmp_path: Path, sim: SimulatedProviderServer) -> None:
    config = _config(tmp_path, sim)
    with sim.renting(KEY_ENV) as market:
        with Board(config) as board:
            job = board.on("gpu").submit(
                "hostname; cat in/d.txt; mkdir -p out; hostname > out/where.txt",
                name="rented", data=["in/d.txt"], fetch=["out/where.txt"])
            (owned,) = owned_rentals(board.config.state_dir)
            assert owned.host == "gpu" and owned.provider == "sim"
            sandbox = sim.sandbox(owned.rental_id)
            assert sandbox["netns"] in _namespaces()
            long = board.on("gpu").submit("sleep 60", name="long")
            assert [r.rental_id for r in owned_rentals(board.config.state_dir)] == [
                owned.rental_id]  # the second submit reused the live rental
            assert job.wait(timeout=60, poll=0.5) is JobState.COMPLETED
            where, data = job.logs().split()
            assert where.startswith("sim-gpu-") and data == "hello"  # ran on the rental
            assert long.cancel() is JobState.CANCELLED
        with Board(config) as board:  # a fresh process, as `mainboard jobs` would be
            pulled = Job(board, job.id).pull()
            assert pulled.paths == ["out/where.txt"] and not pulled.error and not pulled.missing
            back = board.config.root / "out" / "where.txt"
            assert back.read_text().strip() == where
            report = monitor_pass(board)
            assert report["released"] == [owned.rental_id] and report["errors"] == []
        assert owned_rentals(config.parent / ".mainboard") == []
        assert market.list_rentals() == [] and sandbox["netns"] not in _namespaces()
        with Board(config) as board:  # asking about old work never rents a new machine
            with pytest.raises(HostError, match="no live rental"):
                Job(board, job.id).logs()
        assert market.list_rentals() == [] and owned_rentals(config.parent / ".mainboard") == []


def test_a_monitor_pass_never_releases_the_rental_a_submit_is_still_recording_on(
        tmp_path: Path, sim: SimulatedProviderServer) -> None:
    config = _config(tmp_path, sim)
    state, market = config.parent / ".mainboard", sim.market(KEY_ENV)
    chosen, go = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def paused() -> None:  # the job is with its host, its receipt not yet written
        chosen.set()
        assert go.wait(120)

    def second_submit() -> None:
        try:
            with Board(config) as board:
                outcome["id"] = board.on("gpu").submit("hostname", name="second",
                                                       before_record=paused).id
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc
            chosen.set()

    try:
        with Board(config) as board:
            first = board.on("gpu").submit("true", name="first")
            assert first.wait(timeout=60, poll=0.5) is JobState.COMPLETED
        (owned,) = owned_rentals(state)  # every job on it done: idle, as a monitor sees it
        thread = threading.Thread(target=second_submit)
        thread.start()
        assert chosen.wait(120) and "error" not in outcome, outcome
        # A cron'd monitor pass (its own process) lands in the window.
        done = run_cli(config, "monitor", "--json", timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["released"] == []
        assert market.status(owned.rental_id).state == "running"
        go.set()
        thread.join(120)
        assert "error" not in outcome and not list((state / LEASES).glob("*.json")), outcome
        with Board(config) as board:
            second = Job(board, str(outcome["id"]))
            assert second.wait(timeout=60, poll=0.5) is JobState.COMPLETED
            assert second.logs().strip().startswith("sim-gpu-")  # ran on the kept rental
            assert [r.rental_id for r in owned_rentals(state)] == [owned.rental_id]
            assert monitor_pass(board)["released"] == [owned.rental_id]  # now idle: released
    finally:
        go.set()
        for rental in market.list_rentals():
            market.destroy(rental.id)


def test_a_rental_that_cannot_be_used_is_destroyed_and_nothing_is_submitted(
        tmp_path: Path, sim: SimulatedProviderServer) -> None:
    config = provider_workspace(tmp_path, sim, KEY_ENV, root="/proc/no-such/root")
    with sim.renting(KEY_ENV) as market:
        with Board(config) as board:
            with pytest.raises(HostError, match="cannot be created"):
                board.on("gpu").submit("echo never", name="never")
            assert owned_rentals(board.config.state_dir) == [] and market.list_rentals() == []
            receipts = (board.config.state_dir / "rentals.ndjson").read_text()
            assert '"rental.destroyed"' in receipts and "setup failed" in receipts
            assert not (board.config.state_dir / "jobs").exists() or not list(
                (board.config.state_dir / "jobs").glob("*.ndjson"))


def test_a_price_ceiling_below_every_offer_rents_nothing(
        tmp_path: Path, sim: SimulatedProviderServer) -> None:
    config = provider_workspace(tmp_path, sim, KEY_ENV, max_usd_hr=0.0001)
    with Board(config) as board:
        with pytest.raises(ProviderError, match="no offer for gpu=SIM RTX 4090"):
            board.on("gpu").submit("echo never")
        assert owned_rentals(board.config.state_dir) == [] and sim.market(KEY_ENV).list_rentals() == []


def test_a_recorded_rental_the_provider_no_longer_runs_is_not_reached(
        tmp_path: Path, sim: SimulatedProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job rental on record that the provider no longer has (destroyed behind our back):
    asking about the host's jobs is a HostError, not a connection to a gone machine; a key
    the provider refuses fails a submit with the provider's own words, renting nothing."""
    config = _config(tmp_path, sim)
    with Board(config) as board:
        state = board.config.state_dir
        rental_receipts(state).append(RentalCreated(
            provider="sim", rental_id="990001", offer_id="1", label="mainboard-gpu",
            usd_hr=0.5, host="gpu", owner="jobs"))
        with pytest.raises(HostError, match="no live rental on provider 'sim'"):
            board.on("gpu").reach(rent=False)
    monkeypatch.setenv(KEY_ENV, "not-the-key")
    with Board(config) as board, pytest.raises(
            ProviderError, match=f"credentials refused for provider sim \\(env var {KEY_ENV}\\)"):
        board.on("gpu").submit("echo never")
    assert [r.rental_id for r in owned_rentals(state)] == ["990001"]


def test_a_fleet_rental_on_the_same_host_is_never_used_nor_released_by_jobs(
        tmp_path: Path, sim: SimulatedProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path, sim)
    with sim.renting(KEY_ENV) as market:
        with Board(config) as board:
            cfg, host = board.config, board.config.host("gpu")
            assert isinstance(host, ProviderHost)
            identity, public = rental_key(cfg.state_dir)
            with fleet_guard(adapter(cfg, host), cfg, "gpu") as guard:  # as `fleet up` rents
                fleet = rent_cheapest(guard, cfg, "gpu", host, public)
            fleet_box = rental_transport(fleet, name="fleet", identity=identity,
                                         known_hosts=known_hosts_for(cfg.state_dir, "sim",
                                                                     fleet.id))
            fleet_name = fleet_box.run("hostname", check=True).stdout.strip()
            job = board.on("gpu").submit("mkdir -p out; hostname > out/where.txt",
                                         name="beside-the-fleet", fetch=["out/where.txt"])
            owners = {r.rental_id: r.owner for r in owned_rentals(cfg.state_dir)}
            assert owners.pop(fleet.id) == "fleet"
            ((job_rental, owner),) = owners.items()  # the job rented its own machine
            assert owner == "jobs" and job_rental != fleet.id
            assert job.wait(timeout=60, poll=0.5) is JobState.COMPLETED
        state = config.parent / ".mainboard"
        with Board(config) as board:  # a cron'd monitor: a fresh process
            monkeypatch.delenv(KEY_ENV)  # the provider cannot be asked: nothing can be pulled
            blocked = monitor_pass(board)
            assert blocked["released"] == [] and "gpu" in blocked["unreachable_hosts"]
            assert store_of(board).load(job.id).pulled is None  # still owed: not released
            assert market.status(job_rental).state == "running"
        monkeypatch.setenv(KEY_ENV, sim.api_key)
        with Board(config) as board:
            report = monitor_pass(board)
            assert report["released"] == [job_rental] and report["errors"] == []
            assert report["finished"][0]["pulled"] == ["out/where.txt"]
        where = (config.parent / "out" / "where.txt").read_text().strip()
        assert where.startswith("sim-gpu-") and where != fleet_name  # the job's own machine
        pulled_at = next(ts for ts, p in Receipts(store_of(board).file(job.id)).read_timed()
                         if isinstance(p, JobPulled))
        destroyed_at = next(ts for ts, p in rental_receipts(state).read_timed()
                            if isinstance(p, RentalDestroyed) and p.rental_id == job_rental)
        assert pulled_at < destroyed_at  # outputs back before the machine went
        assert market.status(fleet.id).state == "running"  # the fleet's machine is untouched
        assert fleet_box.run("hostname", check=True).stdout.strip() == fleet_name
        assert [r.rental_id for r in owned_rentals(state)] == [fleet.id]
        with Board(config) as board:
            assert monitor_pass(board)["released"] == []  # and stays so on later passes
        assert market.status(fleet.id).state == "running"
        fleet_box.close()


def test_a_rental_recorded_without_an_owner_is_not_released_by_the_monitor(
        tmp_path: Path, sim: SimulatedProviderServer) -> None:
    """An old receipt (no ``owner`` key) still loads; the monitor names it, never ends it."""
    config = _config(tmp_path, sim)
    with sim.renting(KEY_ENV) as market:
        with Board(config) as board:
            job = board.on("gpu").submit("true", name="quick")
            assert job.wait(timeout=60, poll=0.5) is JobState.COMPLETED
            log = rental_receipts(board.config.state_dir)
            text = log.path.read_text()
            assert '"owner":"jobs"' in text.replace(" ", "")
            log.path.write_text(text.replace('"owner": "jobs"', '"owner": null')
                                .replace('"owner":"jobs"', '"owner":null'))
            (old,) = [p for p in log.read() if isinstance(p, RentalCreated)]
            assert old.owner is None
        with Board(config) as board:
            report = monitor_pass(board)
            assert report["released"] == []
            assert any(old.rental_id in e and "fleet down" in e for e in report["errors"])
        assert market.status(old.rental_id).state == "running"


def test_a_job_on_a_rental_runs_in_the_workspace_env_built_there(
        tmp_path: Path, sim: SimulatedProviderServer) -> None:
    """[python.deps] on a provider host: the rental (no route to an index: uv offline, its
    cache warmed here first) gets the env built by the job's submit, timed, and the job runs
    in it on the rented machine."""
    root = tmp_path / "rented root"
    tools = Path(tools_dir(str(root))) / "pkgs" / "bin"  # the root's own uv, as installed
    tools.mkdir(parents=True)
    uv = shutil.which("uv", path=os.path.dirname(sys.executable))
    assert uv, "uv is a test dependency (pyproject.toml [test])"
    shutil.copy2(os.path.realpath(uv), tools / "uv")
    # Another python's env in the same root fills uv's cache from the index (this side).
    provision(LocalTransport("warm"), root=str(root), python=sys.executable, deps=["six==1.16.0"])
    config = provider_workspace(tmp_path, sim, KEY_ENV, {"python.deps": {"six": "1.16.0"},
                                                         "hosts.gpu.env": {"UV_OFFLINE": "1"}},
                                root=str(root), python="/usr/bin/python3")
    with sim.renting(KEY_ENV):
        with Board(config) as board:
            job = board.on("gpu").submit('hostname; python -c "import six, sys; '
                                         'print(six.__version__, sys.prefix)"', name="env")
            assert job.wait(timeout=120, poll=0.5) is JobState.COMPLETED, \
                job.logs(stream="stderr")
            key = job.view().submitted.env_key
            where, ran = job.logs().splitlines()
            assert where.startswith("sim-gpu-") and key
            assert ran == f"1.16.0 {root}/.mainboard/envs/{key}"
            built = [b for b in env_receipts(board.config.state_dir).read("env.provisioned")
                     if isinstance(b, EnvProvisioned)]
            assert [(b.host, b.kind, b.key, b.purpose) for b in built] == [
                ("gpu", "provider", key, "job")] and built[0].seconds > 0
            assert monitor_pass(board)["errors"] == []
