"""The monitor pass, for real: idempotent, safe concurrently, calm about a host that is down.

Jobs are real detached processes (local, and over a real sshd of this test's own that
is stopped and restarted); concurrent passes are real ``mainboard monitor`` processes;
rentals are destroyed on the local SIMULATED provider (a subprocess with real sshd
sandboxes), through the same lifecycle code ``fleet down`` uses.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mainboard.board import Board
from mainboard.bridges import ssh
from mainboard.bridges.base import new_uid
from mainboard.bridges.jobstate import JobState, JobStatus
from mainboard.bridges.providers import RestProvider
from mainboard.bridges.providers.base import Rental
from mainboard.bridges.providers.lifecycle import FLEET, JOBS, RentalGuard, owned_rentals
from mainboard.config import Config, load_config
from mainboard.hosts.leases import LEASE_S, LEASES
from mainboard.jobs.job import Job, store_of
from mainboard.jobs.monitor import LOCK_FILE, monitor_log, monitor_pass, release_rentals
from mainboard.receipts import JobPulled, JobSubmitted
from tests.support.cliserver import popen_mainboard
from tests.support.jobs_workspace import make_workspace, wait_until
from tests.support.services import free_port, start_sshd
from tests.support.sim_provider import SimulatedProviderServer
from tests.support.workspace import run_cli, toml_tables

pytestmark = pytest.mark.live


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Board]:
    with Board(make_workspace(tmp_path)) as found:
        yield found


def _ids(report: dict[str, Any], key: str) -> list[str]:
    return [entry["id"] for entry in report[key]]


def _until_announced(board: Board, jobs: list[Job],
                     only: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """Run passes until every job in ``jobs`` was announced; each must be announced once."""
    seen: dict[str, dict[str, Any]] = {}

    def one_pass() -> bool:
        report = monitor_pass(board, only=only)
        assert only is None or set(_ids(report, "finished") + _ids(report, "failed")) <= only
        for entry in report["finished"] + report["failed"]:
            assert entry["id"] not in seen, f"{entry['id']} announced twice"
            seen[entry["id"]] = entry
        return {j.id for j in jobs} <= set(seen)

    wait_until(one_pass, "every job announced", timeout=30)
    return seen


def test_monitor_announces_once_pulls_and_then_reports_no_change(board: Board) -> None:
    scratch = board.on("scratch")
    ok = scratch.submit("mkdir -p out && cp in/d.txt out/r.txt", name="ok", data=["in/d.txt"],
                        fetch=["out/r.txt"])
    bad = scratch.submit("exit 2", name="bad")
    long = scratch.submit("sleep 60", name="long")
    seen = _until_announced(board, [ok, bad])
    assert (seen[ok.id]["state"], seen[ok.id]["pulled"]) == ("completed", ["out/r.txt"])
    assert (seen[bad.id]["state"], seen[bad.id]["exit_code"]) == ("failed", 2)
    assert (board.config.root / "out" / "r.txt").read_text() == "hello\n"  # the monitor pulled
    quiet = monitor_pass(board)
    assert quiet == {**quiet, "running": 1, "finished": [], "failed": [], "changed": False,
                     "unreachable_hosts": [], "errors": []}
    assert long.cancel() is JobState.CANCELLED
    report = monitor_pass(board)
    assert (_ids(report, "failed"), report["failed"][0]["state"]) == ([long.id], "cancelled")
    assert (report["running"], report["changed"]) == (0, True)
    assert monitor_pass(board)["changed"] is False
    config = board.config.path
    assert config is not None
    fresh = json.loads(run_cli(config, "monitor", "--json").stdout)  # cursor from receipts only
    assert (fresh["running"], fresh["finished"], fresh["failed"], fresh["unreachable_hosts"],
            fresh["changed"]) == (0, [], [], [], False)  # the five keys, as typed
    human = run_cli(config, "monitor")
    assert human.stdout.strip() == "0 job(s) still running or queued; no change"


def test_concurrent_passes_announce_each_job_exactly_once(board: Board) -> None:
    config = board.config.path
    assert config is not None
    jobs = [board.on("scratch").submit(f"exit {i % 2}", name=f"j{i}") for i in range(4)]
    jobs.append(board.on("local").submit("sleep 0.5", name="slow"))
    announced: Counter[str] = Counter()

    def two_at_once() -> bool:
        procs = [popen_mainboard(["--config", str(config),
                                  "monitor", "--json"], stdout=subprocess.PIPE, text=True,
                                 cwd=config.parent) for _ in range(2)]
        for proc in procs:
            out, _ = proc.communicate(timeout=60)
            report = json.loads(out)
            assert report["busy"] is False and report["errors"] == []
            announced.update(_ids(report, "finished") + _ids(report, "failed"))
        return len(announced) == len(jobs)

    wait_until(two_at_once, "every job announced", timeout=60)
    assert announced == Counter({job.id: 1 for job in jobs})
    states = {job.name: job.view().state for job in jobs}
    assert states == {"j0": JobState.COMPLETED, "j1": JobState.FAILED, "j2": JobState.COMPLETED,
                      "j3": JobState.FAILED, "slow": JobState.COMPLETED}


def test_a_host_that_is_down_is_one_entry_not_a_failed_pass(tmp_path: Path) -> None:
    server = start_sshd(tmp_path / "sshd-edge", port=free_port())
    with Board(make_workspace(tmp_path, sshd=server)) as board:
        far = [board.on("edge").submit("sleep 60", name=f"far{i}") for i in range(2)]
        near = board.on("scratch").submit("true", name="near")
        wait_until(lambda: all(j.status() is JobState.RUNNING for j in far), "edge jobs running")
        server.stop()
        ssh.close_all()  # the host is gone: its established connection (sshd child) too
        try:
            down = monitor_pass(board)
            assert down["unreachable_hosts"] == ["edge"] and "edge" in down["host_errors"]
            assert _ids(down, "finished") == [near.id] and down["running"] == 2
            again = monitor_pass(board)
            assert (again["unreachable_hosts"], again["changed"]) == (["edge"], False)
            # A pass scoped away from edge has news, so it writes a line; that line keeps
            # edge unreachable (nobody asked it), so the next plain pass sees no change.
            late = board.on("scratch").submit("true", name="late")
            scoped = _until_announced(board, [late], only={late.id})
            assert scoped[late.id]["state"] == "completed"
            assert monitor_pass(board)["changed"] is False
        finally:
            server = start_sshd(server.dir, port=server.port)  # same keys, same port
        try:
            for job in far:
                job.cancel()
            back = monitor_pass(board)
            assert back["unreachable_hosts"] == [] and back["changed"] is True
            assert sorted(_ids(back, "failed")) == sorted(j.id for j in far)
        finally:
            server.stop()


def test_a_scoped_pass_leaves_every_other_job_to_the_next_plain_pass(board: Board) -> None:
    scratch = board.on("scratch")
    mine = scratch.submit("mkdir -p out && echo mine > out/mine.txt", name="mine",
                          fetch=["out/mine.txt"])
    other = scratch.submit("mkdir -p out && echo other > out/other.txt", name="other",
                           fetch=["out/other.txt"])
    wait_until(lambda: (Path(scratch.root) / "out" / "other.txt").exists(), "other ran")
    seen = _until_announced(board, [mine], only={mine.id})
    assert (seen[mine.id]["state"], seen[mine.id]["pulled"]) == ("completed", ["out/mine.txt"])
    other_now = store_of(board).load(other.id)  # never asked about, never pulled
    assert (other_now.finished, other_now.pulled) == (False, None)
    assert not (board.config.root / "out" / "other.txt").exists()
    scoped = monitor_pass(board, only={mine.id})
    assert (scoped["running"], scoped["changed"], scoped["finished"]) == (0, False, [])
    config = board.config.path
    assert config is not None
    told: Counter[str] = Counter()

    def plain_pass() -> bool:  # as cron runs it
        report = json.loads(run_cli(config, "monitor", "--json").stdout)
        told.update(_ids(report, "finished") + _ids(report, "failed"))
        return bool(told[other.id])

    wait_until(plain_pass, "other announced by a plain `mainboard monitor`", timeout=30)
    assert told == Counter({other.id: 1})  # "mine" is not announced a second time
    assert (board.config.root / "out" / "other.txt").read_text() == "other\n"
    assert monitor_pass(board)["changed"] is False
    assert monitor_pass(board, only={mine.id, other.id})["changed"] is False


def test_a_pass_that_cannot_get_the_lock_reports_busy_and_does_nothing(board: Board) -> None:
    job = board.on("local").submit("true", name="quick")
    assert job.wait(timeout=30, poll=0.2) is JobState.COMPLETED
    lock = board.config.state_dir / LOCK_FILE
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a pass in another process holds it
        busy = monitor_pass(board, lock_wait=0.3)
    assert (busy["busy"], busy["changed"], busy["finished"]) == (True, False, [])
    assert not monitor_log(board.config.state_dir).path.exists()
    assert _ids(monitor_pass(board), "finished") == [job.id]


def test_corrupt_lines_are_reported_with_file_and_line(board: Board) -> None:
    first = board.on("local").submit("true", name="first")
    second = board.on("local").submit("true", name="second")
    jobs_file = board.config.state_dir / "jobs" / f"{first.id}.ndjson"
    with jobs_file.open("a") as fh:
        fh.write('{"topic":"job.state","ts":0,"payload":{"id":1}}\n')
    log = monitor_log(board.config.state_dir).path
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("garbage\n")
    seen = _until_announced(board, [first, second])
    assert set(seen) == {first.id, second.id}
    report = monitor_pass(board)
    assert report["changed"] is False
    assert any(e.startswith(f"{jobs_file}:3: bad job.state payload")  # after job.cost
               for e in report["errors"])
    assert any(e.startswith(f"{log}:1: not a JSON receipt line") for e in report["errors"])


def _provider_config(sim: SimulatedProviderServer, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch, hosts: tuple[str, ...]) -> Config:
    """A workspace with provider hosts ``hosts`` on the simulated provider ``sim``."""
    monkeypatch.setenv("MB_TEST_SIM_KEY", sim.api_key)
    return load_config(make_workspace(
        tmp_path, extra_hosts={h: {"kind": "provider", "provider": "sim"} for h in hosts},
        extra=toml_tables({"providers.sim": {"kind": "simulated", "api_url": sim.url,
                                             "api_key_env": "MB_TEST_SIM_KEY"}})))


def _rent(adapter: RestProvider, config: Config, hosts: tuple[str, ...],
          tmp_path: Path, owner: str = JOBS) -> dict[str, Rental]:
    """A real rental on the simulated provider for each host, recorded as a job submit
    (``owner = "jobs"``) or ``fleet up`` (``"fleet"``) records one."""
    key = tmp_path / "id_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True)
    offer = adapter.cheapest("SIM_RTX_4090", 1.0)
    return {host: RentalGuard(adapter, config.state_dir, host=host, owner=owner).rent(
        offer, ssh_public_key=key.with_suffix(".pub").read_text(), label=f"mb-test-{host}",
        wait=None) for host in hosts}


def test_release_rentals_destroys_only_the_done_hosts_rentals(
        sim: SimulatedProviderServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _provider_config(sim, tmp_path, monkeypatch, ("gpu-a", "gpu-b"))
    adapter = RestProvider("sim", api_url=sim.url, api_key_env="MB_TEST_SIM_KEY")
    try:
        fleet = _rent(adapter, config, ("gpu-a",), tmp_path, owner=FLEET)["gpu-a"]
        rentals = _rent(adapter, config, ("gpu-a", "gpu-b"), tmp_path)
        before = time.time() - 3600  # work submitted before these rentals existed
        assert release_rentals(config, {"gpu-a": before, "gpu-b": before}) == ([], [])
        done, errors = release_rentals(config, {"gpu-a": time.time()})
        assert (done, errors) == ([rentals["gpu-a"].id], [])  # never the fleet's on gpu-a
        assert adapter.status(rentals["gpu-a"].id).state == "destroyed"
        assert adapter.status(fleet.id).state != "destroyed"
        assert [r.rental_id for r in owned_rentals(config.state_dir)] == [
            fleet.id, rentals["gpu-b"].id]
        assert release_rentals(config, {"gpu-a": time.time()}) == ([], [])  # nothing left
    finally:
        for rental in adapter.list_rentals():
            adapter.destroy(rental.id)


def test_a_crashed_submits_lease_pins_its_rental_only_until_it_expires(
        sim: SimulatedProviderServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _provider_config(sim, tmp_path, monkeypatch, ("gpu-a",))
    adapter = RestProvider("sim", api_url=sim.url, api_key_env="MB_TEST_SIM_KEY")
    try:
        rental = _rent(adapter, config, ("gpu-a",), tmp_path)["gpu-a"]
        # A submit that took its lease and died before recording its job (no drop, no cleanup).
        crashed = subprocess.run(
            [sys.executable, "-c", "import os, sys\n"
             "from mainboard.hosts.leases import take_lease\n"
             "take_lease(sys.argv[1], 'gpu-a')\nos._exit(9)", str(config.state_dir)],
            capture_output=True, text=True, timeout=60)
        assert crashed.returncode == 9, crashed.stderr
        (lease,) = (config.state_dir / LEASES).glob("*.json")
        idle = {"gpu-a": time.time()}
        assert release_rentals(config, idle) == ([], [])  # held: the submit may be alive
        assert adapter.status(rental.id).state != "destroyed" and lease.exists()
        expired = time.time() + LEASE_S + 60  # the same pass, once the lease ran out
        assert release_rentals(config, idle, now=expired) == ([rental.id], [])
        assert adapter.status(rental.id).state == "destroyed" and not lease.exists()
        assert owned_rentals(config.state_dir) == []
    finally:
        for left in adapter.list_rentals():
            adapter.destroy(left.id)


def _provider_job(board: Board, name: str, *, fetch: tuple[str, ...] = ()) -> str:
    """Record a job accepted on the rented host ``gpu``, as its bridge's submit records one.

    (Jobs reach a rental through ``fleet up``'s bridge; the monitor only reads the
    receipts, and a scoped pass never asks the host, so none is needed here.)
    """
    uid = new_uid(name)
    root = "/root/mainboard"
    store_of(board).submitted(JobSubmitted(
        id=uid, host="gpu", kind="provider", job_id=uid, name=name,
        job_dir=f"{root}/.mainboard/jobs/{uid}", root=root, spec={}, fetch=list(fetch),
        submitted_at=time.time()))
    return uid


def test_a_rental_is_released_only_when_no_job_on_it_is_owed_anything(
        sim: SimulatedProviderServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _provider_config(sim, tmp_path, monkeypatch, ("gpu",))
    adapter = RestProvider("sim", api_url=sim.url, api_key_env="MB_TEST_SIM_KEY")
    done = JobStatus(JobState.COMPLETED, "exited", 0)
    try:
        rental = _rent(adapter, config, ("gpu",), tmp_path)["gpu"]
        assert config.path is not None
        with Board(config.path) as board:
            store = store_of(board)
            batch_a, other = _provider_job(board, "batch-a"), _provider_job(
                board, "other", fetch=("out/o.txt",))
            store.observe(batch_a, done)
            first = monitor_pass(board, only={batch_a})  # "other" still runs on gpu
            assert (_ids(first, "finished"), first["released"]) == ([batch_a], [])
            store.observe(other, done)  # finished, results not back yet: still owed
            batch_b = _provider_job(board, "batch-b")
            store.observe(batch_b, done)
            second = monitor_pass(board, only={batch_a, batch_b})
            assert (_ids(second, "finished"), second["released"]) == ([batch_b], [])
            assert adapter.status(rental.id).state != "destroyed"
            store.pulled(JobPulled(id=other, paths=["out/o.txt"], bytes=10))
            last = monitor_pass(board)  # the last job owed on gpu is announced: release
            assert (_ids(last, "finished"), last["released"]) == ([other], [rental.id])
            assert last["errors"] == []
        assert adapter.status(rental.id).state == "destroyed"
        assert owned_rentals(config.state_dir) == []
    finally:
        for left in adapter.list_rentals():
            adapter.destroy(left.id)


def test_a_release_that_failed_is_tried_again_and_later_rentals_are_left_alone(
        sim: SimulatedProviderServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider API refuses (no key) when the work ends: the pass says the rental may
    still cost money; the next pass, with no job news at all, destroys it. A rental made
    after the host's last job (new work, fleet workers) is not the monitor's to end."""
    config = _provider_config(sim, tmp_path, monkeypatch, ("gpu",))
    adapter = RestProvider("sim", api_url=sim.url, api_key_env="MB_TEST_SIM_KEY")
    try:
        rental = _rent(adapter, config, ("gpu",), tmp_path)["gpu"]
        assert config.path is not None
        with Board(config.path) as board:
            job = _provider_job(board, "work")
            store_of(board).observe(job, JobStatus(JobState.COMPLETED, "exited", 0))
            later = _rent(adapter, config, ("gpu",), tmp_path)["gpu"]
            monkeypatch.delenv("MB_TEST_SIM_KEY")
            failed = monitor_pass(board)
            assert (_ids(failed, "finished"), failed["released"]) == ([job], [])
            assert [e for e in failed["errors"] if "may still cost money" in e
                    and rental.id in e] and not [e for e in failed["errors"] if later.id in e]
            monkeypatch.setenv("MB_TEST_SIM_KEY", sim.api_key)
            retried = monitor_pass(board)
            assert (retried["finished"], retried["released"], retried["changed"],
                    retried["errors"]) == ([], [rental.id], True, [])
            quiet = monitor_pass(board)
            assert (quiet["released"], quiet["changed"]) == ([], False)
        assert adapter.status(rental.id).state == "destroyed"
        assert [r.rental_id for r in owned_rentals(config.state_dir)] == [later.id]
    finally:
        for left in adapter.list_rentals():
            adapter.destroy(left.id)


def test_a_finished_job_whose_host_was_removed_is_announced_not_a_failed_pass(
        tmp_path: Path) -> None:
    gone = {"gone": {"kind": "local", "root": str(tmp_path / "gone-root")}}
    with Board(make_workspace(tmp_path, extra_hosts=gone)) as board:
        job = board.on("gone").submit("mkdir -p out && echo r > out/r.txt", fetch=["out/r.txt"])
        assert job.wait(timeout=30, poll=0.2) is JobState.COMPLETED  # verdict, not pulled yet
    with Board(make_workspace(tmp_path)) as board:  # the same workspace, "gone" undeclared
        report = monitor_pass(board)
        assert (_ids(report, "finished"), report["finished"][0]["pulled"]) == ([job.id], [])
        pulled = store_of(board).load(job.id).pulled
        assert pulled is not None and "'gone'" in pulled.error
        assert monitor_pass(board)["changed"] is False
