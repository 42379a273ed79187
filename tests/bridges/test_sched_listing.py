"""Live tier: every scheduler question of a workspace about one cluster goes through one
listing a tick (issue 29, item 3), counted on a real SLURM (and its PBS wrappers) with
counting wrappers on PATH: fleet workers' ends, the keeper's listing by tag, monitor
passes and ``jobs list``, through the broker or, without one, the workspace state."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mainboard import keys
from mainboard.board import Board
from mainboard.bridges.gate import GATES_ENV, RATE_ENV
from mainboard.bridges.jobstate import JobState
from mainboard.bridges.poller import TICK_S, FileShare, Poller, RedisShare, file_share
from mainboard.errors import CommandFailed, JobCapReached
from mainboard.jobs import live
from mainboard.jobs.job import bridge_of
from tests.support.jobs_workspace import make_workspace, wait_until
from tests.support.sched_counting import Minute, asked, counting_path
from tests.support.services import RedisServer, SlurmCluster

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]


@pytest.fixture
def board(slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[tuple[Board, Path]]:
    """A workspace with the SLURM host ``hpc`` and the PBS-wrapper host ``pbs``, every
    scheduler command counted; (its Board, the count log)."""
    log = tmp_path / "calls"
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    monkeypatch.setenv("PATH", counting_path(tmp_path / "bin", log, slurm_cluster.env["PATH"]))
    monkeypatch.setenv(GATES_ENV, str(tmp_path / "gates"))
    monkeypatch.setenv(RATE_ENV, "100000")
    found = Board(make_workspace(tmp_path, slurm=slurm_cluster))
    try:
        yield found, log
    finally:
        for host in ("hpc", "pbs"):
            owed = [v.record() for v in live.cached(live.store_of(found)).views
                    if v.host == host and not v.finished]
            if owed:
                bridge_of(found.on(host)).cancel(owed)
        found.close()


def _held(board: Board, host: str, count: int) -> list[str]:
    hold = {"hpc": "--hold", "pbs": "-h"}[host]
    return [board.on(host).submit("true", name="held", sync=False, extra=[hold])
            .view().submitted.job_id for _ in range(count)]


@pytest.mark.parametrize("host", ["hpc", "pbs"])
def test_a_minute_of_every_caller_costs_one_listing_a_tick_whatever_their_number(
        board: tuple[Board, Path], redis_server: RedisServer, host: str) -> None:
    found, log = board
    ids = _held(found, host, 6)
    client = redis.Redis.from_url(redis_server.url)
    ticks = int(60 / TICK_S)
    counted = {}
    for workers, callers in ((2, 1), (6, 3)):
        client.delete(keys.sched_listing(host))
        scene = Minute(found, host, ids[:workers], redis_server.url, monitors=callers,
                       listings=callers, looks=3, ends=host == "hpc")
        mark = asked(log)
        scene.per_call()
        before = asked(log) - mark
        mark = asked(log)
        scene.shared()
        counted[(workers, callers)] = (before, asked(log) - mark)
    afters = {after for _before, after in counted.values()}
    assert afters == {3 * ticks + 1}, counted  # the keeper's looks, and its reconcile's
    assert counted[(6, 3)][0] > counted[(2, 1)][0], counted  # per call: grows with callers
    states = {v.submitted.job_id: v.state for v in live.cached(live.store_of(found)).views}
    assert {states[i] for i in ids} == {JobState.PENDING.value}  # held, as the listing says


def test_without_a_broker_concurrent_listings_share_the_workspace_file(
        board: tuple[Board, Path]) -> None:
    found, log = board
    ids = _held(found, "hpc", 3)
    share = file_share(found.config.state_dir)
    mark = asked(log)
    sweeps: list[live.Sweep] = []
    threads = [threading.Thread(target=lambda: sweeps.append(
        live.sweep(found, timeout=None, share=share))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert asked(log) - mark == 1  # eight callers, one squeue
    assert all(not s.unreachable and s.fresh >= {v.id for v in s.views} for s in sweeps)
    stored = json.loads((found.config.state_dir / "sched" / "hpc.json").read_text())
    assert set(ids) <= set(stored["rows"])
    mark = asked(log)
    live.sweep(found, timeout=None)  # the default share is the workspace state's
    assert asked(log) - mark == 0


def _next_tick(path: Path) -> None:
    """The stored listing made a tick older (what time would do)."""
    listing = json.loads(path.read_text())
    listing["at"] -= TICK_S
    path.write_text(json.dumps(listing))


def test_a_job_that_ends_between_ticks_is_seen_ended_at_the_next_tick(
        board: tuple[Board, Path], tmp_path: Path) -> None:
    found, log = board
    gate = tmp_path / "gate"
    job = found.on("hpc").submit(f"while [ ! -e {gate} ]; do sleep 0.1; done; exit 3",
                                 name="gated", sync=False)
    share, stored = FileShare(tmp_path / "sched"), tmp_path / "sched" / "hpc.json"

    def running() -> bool:
        live.sweep(found, timeout=None, share=share)
        if job.view().state != JobState.RUNNING.value:
            _next_tick(stored)
            return False
        return True

    wait_until(running, "the job seen running", 60)
    gate.touch()
    job_id = job.view().submitted.job_id
    wait_until(lambda: subprocess.run(  # the scheduler's own word that it ended
        ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True,
        text=True).stdout.strip() == "FAILED", "the job ended at the scheduler", 60)
    mark = asked(log)
    live.sweep(found, timeout=None, share=share)  # within the tick: the listing's word
    assert (job.view().state, asked(log)) == (JobState.RUNNING.value, mark)
    _next_tick(stored)
    live.sweep(found, timeout=None, share=share)  # the next tick: one listing, the end
    view = job.view()
    assert (view.state, view.exit_code, asked(log) - mark) == (JobState.FAILED.value, 3, 1)


def test_the_keepers_tag_listing_is_taken_after_what_it_must_see(
        board: tuple[Board, Path], redis_server: RedisServer) -> None:
    found, log = board
    client = redis.Redis.from_url(redis_server.url)
    client.delete(keys.sched_listing("hpc"))
    poller = Poller(RedisShare(client), "hpc")
    bridge = bridge_of(found.on("hpc"))
    mark = asked(log)
    assert bridge.tagged("mbf-none-", poller) == {}
    assert bridge.tagged("mbf-none-", poller) == {}  # the tick's listing, read again
    assert asked(log) - mark == 1
    tagged = found.on("hpc").submit("true", name="tagged", sync=False, extra=["--hold"],
                                    tag="mbf-none-w1")
    # the tick's listing predates the submission: one taken since is asked for, and has it
    seen = bridge.tagged("mbf-none-", poller, since=time.time())
    assert seen == {"mbf-none-w1": tagged.view().submitted.job_id}
    assert asked(log) - mark == 2


def test_a_sites_cap_refusal_is_one_line_the_keeper_holds_on(
        board: tuple[Board, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test SLURM has no slurmdbd, so no QOS can refuse: ``sbatch`` here answers as a
    site's QOSMaxSubmitJobPerUserLimit does (its two real lines, exit 1)."""
    found, _log = board
    site = tmp_path / "site"
    site.mkdir()
    (site / "sbatch").write_text(
        "#!/bin/sh\necho 'sbatch: error: QOSMaxSubmitJobPerUserLimit' >&2\n"
        "echo 'sbatch: error: Batch job submission failed: Job violates accounting/QOS "
        "policy (job submit limit, user'\"'\"'s size and/or time limits)' >&2\nexit 1\n")
    (site / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{site}:{os.environ['PATH']}")
    with pytest.raises(JobCapReached) as refused:
        bridge_of(found.on("hpc")).submit(command="true", name="capped")
    assert str(refused.value) == (
        "host 'hpc': the site's job cap refused the submission (MaxSubmitJob); wait for "
        "some jobs to end, or set [hosts.hpc] max_jobs below the site's cap")
    with pytest.raises(CommandFailed):  # any other refusal stays the command's failure
        (site / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: Invalid account' >&2\n"
                                     "exit 1\n")
        bridge_of(found.on("hpc")).submit(command="true", name="other")


def test_a_refresher_killed_holding_the_lock_delays_no_one_who_needs_a_fresh_listing(
        board: tuple[Board, Path], redis_server: RedisServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A keeper SIGKILLed while refreshing leaves the lock for its TTL: ordinary readers
    take the last listing after ``WAIT_S``; a reconciler, which must see the submissions
    made since, asks the scheduler itself."""
    from mainboard.bridges import poller as poller_module

    found, log = board
    monkeypatch.setattr(poller_module, "WAIT_S", 0.3)
    client = redis.Redis.from_url(redis_server.url)
    share = RedisShare(client)
    bridge = bridge_of(found.on("hpc"))
    client.delete(keys.sched_listing("hpc"))
    assert bridge.tagged("mbf-dead-", Poller(share, "hpc")) == {}  # the listing before
    client.set(keys.sched_lock("hpc"), "killed-refresher", px=60_000)
    job = found.on("hpc").submit("true", name="late", sync=False, extra=["--hold"],
                                 tag="mbf-dead-w1")
    mark = asked(log)
    assert bridge.tagged("mbf-dead-", Poller(share, "hpc")) == {}  # the last one will do
    assert asked(log) == mark
    seen = bridge.tagged("mbf-dead-", Poller(share, "hpc"), since=time.time())
    assert seen == {"mbf-dead-w1": job.view().submitted.job_id}
    assert asked(log) - mark == 1
