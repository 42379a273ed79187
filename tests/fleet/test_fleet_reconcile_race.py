"""The reconciler, and a pool's submission, against what races them (no services needed).

Seen live (test_fleet_reconcile.py, about one run in six): ``fleet up`` submitted the
ssh pool's worker while the keeper it had just started was reconciling; the keeper had
read the fleet record before the worker's ``worker.submitting`` receipt, listed the host
after the job started, and cancelled the job as one "no receipt knows". The record is
now read again after each listing. The host here is a stand-in whose listing writes the
racing receipt, as ``fleet up`` does, before answering.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from mainboard.fleet import autoscale
from mainboard.fleet.launch import BrokerRoute
from mainboard.fleet.reconcile import Reconciler
from mainboard.fleet.records import fleet_receipts, owner_prefix, read_fleet
from mainboard.fleet.scaling import Decision, PoolView
from mainboard.receipts import FleetScale, WorkerSubmitting
from tests.support.fleet_helpers import config, table, workspace
from tests.support.services import RedisServer


def test_a_job_submitted_while_its_host_is_listed_is_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = workspace(tmp_path / "ws", table("fleet.pools.p", host="local", queues=["q"],
                                          jobs=1))
    cfg = config(ws)
    prefix = owner_prefix(cfg.state_dir)
    cancelled: list[list[str]] = []

    class Host:
        """The host's answer: the racing job and one that nobody submitted."""

        name = kind = "local"
        listing_command = None  # no scheduler listing to share

        def tagged(self, wanted: str, poller: object = None,
                   since: float = 0.0) -> dict[str, str]:
            assert wanted == prefix
            fleet_receipts(cfg.state_dir).append(WorkerSubmitting(
                worker_id="racing", host="local", tag=prefix + "racing", pid=os.getpid(),
                pool="p"))  # fleet up, alive, between its receipt and the host's answer
            return {prefix + "racing": "job-1", prefix + "stray": "job-2"}

        def cancel(self, ids: list[str]) -> None:
            cancelled.append(list(ids))

    reconciler = Reconciler(cfg)  # reads the record before the submission
    monkeypatch.setattr(reconciler, "bridge", lambda host, root: Host())
    done = reconciler.run()
    assert cancelled == [["job-2"]]  # the stray one only
    assert done.cleaned == ["local: job job-2 (no receipt knows it)"]
    assert done.closed == [] and done.adopted == [] and done.errors == []


def test_a_tunnelled_worker_is_not_lost_for_the_silence_of_a_restarted_keeper() -> None:
    """The cause of the reconcile test's flake under load: the ssh worker reaches the broker
    only through the keeper's reverse tunnel. The keeper is SIGKILLed at T (the worker's
    last beat); `fleet status` reconciles and starts a new keeper, which reconciles again
    (squeue, qstat, ssh: slow under load) and only then opens the tunnel and starts its
    autoscaler. Its first look came more than LOST_AFTER_S (15 s) after T, so the worker
    (alive, adopted) was called lost, stopped and replaced. Its silence now counts from
    when its tunnel came up; a worker reaching the broker directly is judged by its beat."""
    from mainboard.fleet.autoscale import LOST_AFTER_S, silent_s
    from mainboard.receipts import WorkerStarted

    def worker(via: str) -> WorkerStarted:
        return WorkerStarted(worker_id="w1", host="lo", kind="ssh", node="ssh-lo",
                             queues=["q"], concurrency=1, job={}, root="/r", python="py",
                             broker_via=via, secret_path="/s")

    beat = 1000.0  # the last beat, as the first keeper died
    back = beat + 3 * LOST_AFTER_S  # the new keeper's tunnel up after a long restart
    up = {"w1": {"healthy": True, "since": back}}
    first_look = back + 0.2
    assert silent_s(worker("tunnel"), beat, first_look, up) == pytest.approx(0.2)
    assert silent_s(worker("direct"), beat, first_look, up) > LOST_AFTER_S  # beats itself
    # tunnel up, and still no beat long after: gone for real
    assert silent_s(worker("tunnel"), beat, back + LOST_AFTER_S + 1, up) > LOST_AFTER_S
    # a beat after the tunnel came up is the one that counts
    assert silent_s(worker("tunnel"), back + 10, back + 11, up) == pytest.approx(1.0)
    # no healthy tunnel (the keeper still dialling): not judged here
    assert silent_s(worker("tunnel"), beat, first_look, {}) is None
    assert silent_s(worker("tunnel"), beat, first_look,
                    {"w1": {"healthy": False, "since": None}}) is None
    assert silent_s(worker("tunnel"), None, first_look, up) is None  # never beat: starting


def test_the_keeper_says_since_when_a_tunnel_is_up_and_only_while_it_is() -> None:
    from mainboard.bridges.tunnel import TunnelStatus
    from mainboard.fleet.keeper import status_row

    held = TunnelStatus("w1", 40001, "127.0.0.1:6379", True, 0, 1, 1, None)
    assert status_row(held, None, 1234.5)["since"] == 1234.5
    down = TunnelStatus("w1", 40001, "127.0.0.1:6379", False, 1, 0, 0, "reset")
    assert status_row(down, None, 1234.5) == {"healthy": False, "since": None,
                                              "remote_port": 40001, "reconnects": 1,
                                              "error": "reset"}


def test_the_restarted_keepers_first_look_keeps_the_adopted_tunnelled_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer) -> None:
    """The same ordering through the autoscaler's look, on a real Redis registry: the
    worker's last beat 40 s ago (before the first keeper died), its tunnel up again 0.2 s
    ago in the new keeper; the look keeps it running, not lost. Its job's state is a
    stand-in for the ssh host's answer."""
    import json
    import time

    import redis

    from mainboard import keys
    from mainboard.bridges.jobstate import JobState, JobStatus
    from mainboard.fleet import autoscale
    from mainboard.fleet.records import read_fleet
    from mainboard.receipts import WorkerStarted
    from mainboard.statedir import fleet_dir

    ws = workspace(tmp_path / "ws", table("broker", url=redis_server.url),
                   table("fleet.pools.lo", host="local", queues=["t31.lo"], jobs=1))
    cfg = config(ws)
    worker = WorkerStarted(worker_id="w8", host="local", kind="local", node="ssh-lo-job8",
                           queues=["t31.lo"], concurrency=1, job={}, root="/r", python="py",
                           broker_via="tunnel", secret_path="/s", pool="lo")
    fleet_receipts(cfg.state_dir).append(worker)
    now = time.time()
    r = redis.Redis.from_url(redis_server.url)
    r.zadd(keys.workers_index(), {"ssh-lo-job8@box": now - 40})
    r.hset(keys.worker("ssh-lo-job8@box"), mapping={"beat": now - 40, "started": now - 60})
    (fleet_dir(cfg.state_dir) / "tunnels.json").write_text(json.dumps(
        {"w8": {"healthy": True, "since": now - 0.2, "remote_port": 40008}}))
    monkeypatch.setattr(autoscale, "poll_jobs", lambda config, members, *share: {
        m.worker_id: JobStatus(JobState.RUNNING, "running") for m in members})
    scaler = autoscale.Autoscaler(cfg)
    try:
        look = scaler.look("lo", cfg.fleet.pools["lo"], read_fleet(cfg.state_dir),
                           redis_server.url)
        assert look.stale == [] and [a.state for a in look.view.allocs] == ["running"]
        (fleet_dir(cfg.state_dir) / "tunnels.json").write_text(json.dumps(
            {"w8": {"healthy": True, "since": now - 30, "remote_port": 40008}}))
        look = scaler.look("lo", cfg.fleet.pools["lo"], read_fleet(cfg.state_dir),
                           redis_server.url)  # up 30 s and still silent: lost indeed
        assert [(w.worker_id, round(s)) for w, s in look.stale] == [("w8", 30)]
    finally:
        r.delete(keys.worker("ssh-lo-job8@box"))
        r.zrem(keys.workers_index(), "ssh-lo-job8@box")


def test_a_pool_stopped_between_a_look_and_its_submission_gets_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen once in a fresh clone (test_fleet_nodes): `fleet down` wrote the pool's stop while
    a keeper's look, taken before it, went on to submit; the new allocation was left running.
    The submission checks the pool again under the lock `fleet down` stops pools under."""
    ws = workspace(tmp_path / "ws", table("fleet.pools.p", host="local", queues=["q"], jobs=1))
    cfg = config(ws)
    fleet_receipts(cfg.state_dir).append(FleetScale(pool="p", action="start", reason="fleet up"))
    submitted: list[str] = []

    def start_one(launcher: object, host: str) -> SimpleNamespace:  # the scheduler's submit
        submitted.append(host)
        return SimpleNamespace(worker_id=f"w{len(submitted)}")

    monkeypatch.setattr(autoscale, "start_one", start_one)
    monkeypatch.setattr(autoscale, "broker_route",
                        lambda config, start: BrokerRoute("redis://127.0.0.1:1"))
    scaler = autoscale.Autoscaler(cfg)
    view = PoolView("p", cfg.fleet.pools["p"])  # the look: active, nothing running
    decision = Decision("submit", "1 task queued", count=1)
    fleet_receipts(cfg.state_dir).append(FleetScale(pool="p", action="stop",
                                                    reason="fleet down"))
    scaler.submit("p", cfg.fleet.pools["p"], view, decision)
    assert submitted == []
    assert [s.action for s in read_fleet(cfg.state_dir).scale] == ["start", "stop"]
    fleet_receipts(cfg.state_dir).append(FleetScale(pool="p", action="start", reason="fleet up"))
    scaler.submit("p", cfg.fleet.pools["p"], view, decision)  # active again: it submits
    assert submitted == ["local"]
    assert read_fleet(cfg.state_dir).scale[-1].worker_ids == ["w1"]  # its submit receipt
