"""Live tier: jobs on a ``kind = "provider"`` host, rented from the LOCAL SIMULATED provider.

The simulated provider (a loopback HTTP server; a "rental" is a network namespace with
its own sshd and hostname) is driven through the real REST adapter. Proven here: a
submit rents a machine (recorded in rentals.ndjson), a second submit reuses it, the
jobs run there (its hostname), wait/logs/pull/cancel work, asking about jobs never
rents, and a monitor pass destroys the rental once no job is owed anything.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mainboard.board import Board
from mainboard.bridges.jobstate import JobState
from mainboard.bridges.providers import RestProvider, owned_rentals
from mainboard.errors import HostError, ProviderError
from mainboard.jobs.job import Job
from mainboard.jobs.monitor import monitor_pass
from tests.jobs_workspace import make_workspace
from tests.sim_provider import SimulatedProviderServer
from tests.workspace import toml_tables

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]
KEY_ENV = "MB_JOBS_SIM_KEY"


def _market(sim: SimulatedProviderServer) -> RestProvider:
    return RestProvider("sim", api_url=sim.url, api_key_env=KEY_ENV, env={KEY_ENV: sim.api_key})


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def _config(tmp_path: Path, sim: SimulatedProviderServer) -> Path:
    return make_workspace(
        tmp_path,
        extra_hosts={"gpu": {"kind": "provider", "provider": "sim", "gpu": "SIM RTX 4090",
                             "max_usd_hr": 1.0, "root": str(tmp_path / "rented root")}},
        extra=toml_tables({"providers.sim": {"kind": "simulated", "api_url": sim.url,
                                             "api_key_env": KEY_ENV}}))


def test_jobs_on_a_rented_machine_then_the_monitor_releases_it(
        tmp_path: Path, sim: SimulatedProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, sim.api_key)
    config = _config(tmp_path, sim)
    market = _market(sim)
    try:
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
    finally:
        for rental in market.list_rentals():
            market.destroy(rental.id)


def test_a_rental_that_cannot_be_used_is_destroyed_and_nothing_is_submitted(
        tmp_path: Path, sim: SimulatedProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, sim.api_key)
    config = make_workspace(
        tmp_path,
        extra_hosts={"gpu": {"kind": "provider", "provider": "sim", "gpu": "SIM RTX 4090",
                             "max_usd_hr": 1.0, "root": "/proc/no-such/root"}},
        extra=toml_tables({"providers.sim": {"kind": "simulated", "api_url": sim.url,
                                             "api_key_env": KEY_ENV}}))
    market = _market(sim)
    try:
        with Board(config) as board:
            with pytest.raises(HostError, match="cannot be created"):
                board.on("gpu").submit("echo never", name="never")
            assert owned_rentals(board.config.state_dir) == [] and market.list_rentals() == []
            receipts = (board.config.state_dir / "rentals.ndjson").read_text()
            assert '"rental.destroyed"' in receipts and "setup failed" in receipts
            assert not (board.config.state_dir / "jobs").exists() or not list(
                (board.config.state_dir / "jobs").glob("*.ndjson"))
    finally:
        for rental in market.list_rentals():
            market.destroy(rental.id)


def test_a_price_ceiling_below_every_offer_rents_nothing(
        tmp_path: Path, sim: SimulatedProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, sim.api_key)
    config = make_workspace(
        tmp_path,
        extra_hosts={"gpu": {"kind": "provider", "provider": "sim", "gpu": "SIM RTX 4090",
                             "max_usd_hr": 0.0001}},
        extra=toml_tables({"providers.sim": {"kind": "simulated", "api_url": sim.url,
                                             "api_key_env": KEY_ENV}}))
    with Board(config) as board:
        with pytest.raises(ProviderError, match="no offer for gpu=SIM RTX 4090"):
            board.on("gpu").submit("echo never")
        assert owned_rentals(board.config.state_dir) == [] and _market(sim).list_rentals() == []
