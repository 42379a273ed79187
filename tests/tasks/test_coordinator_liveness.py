"""A worker killed with SIGKILL mid-run loses nothing; liveness decisions in isolation.

The kill tests run real `celery worker` subprocesses on a real Redis and kill one of two
mid-batch (or mid-bundle: several batches in one task): only its pool child (the worker master survives and Celery requeues), or the
whole process group (as when a node dies; Redis would hold the message for the whole
visibility timeout). The coordinator must notice through the batch's heartbeat claim,
re-send, and end with exactly the undisturbed run's numbers.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import mainboard
from mainboard import keys
from mainboard.config import Config
from mainboard.errors import IntegrationFailed, LostBatch
from mainboard.tasks import bundles
from mainboard.tasks.liveness import (
    DEATH_FLOOR_S,
    FIFO_GRACE_S,
    QUEUE_FLOOR_S,
    Deaths,
    Liveness,
    Timing,
)
from mainboard.tasks.runner import load_spec
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import fleet_iter, same_numbers, slow_spec, write_workspace
from tests.support.services import RedisServer

SLOW = slow_spec(0.3, stop={"max_samples": 160_000})  # 4 iterations of 4 batches of 0.3 s


@pytest.fixture
def workspace(tmp_path: Path, redis_server: RedisServer) -> Config:
    return write_workspace(tmp_path / "ws", redis_server)


@pytest.fixture
def fleet(redis_server: RedisServer, tmp_path: Path) -> Iterator[LocalWorkers]:
    yield from fleet_iter(2, redis_server, tmp_path / "fleet")


def wait_for_claim(r: redis.Redis, run_id: str, stage: str, timeout: float = 60
                   ) -> tuple[str, int]:
    """(worker node, pool pid) of a live claim on ``stage`` from iteration 1 on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for key in r.scan_iter(match=f"{keys.PREFIX}run:{run_id}:it:*:claim:*"):
            holder = r.get(key)
            iteration = int(key.decode().split(":it:")[1].split(":")[0])
            if holder and iteration >= 1:
                node, pid, held = holder.decode().split("|")
                if held == stage:
                    return node, int(pid)
        time.sleep(0.02)
    raise TimeoutError(f"no worker claimed a {stage} stage of run {run_id}")


def on_fleet(run: dict[str, Any], workspace: Config) -> Any:
    """The run on the module's fleet only (``workers=0``)."""
    return mainboard.integrate(run, workers=0, config=workspace)


def killed_mid_run(run: dict[str, Any], workspace: Config, fleet: LocalWorkers,
                   redis_server: RedisServer, stage: str, victim: str) -> tuple[Any, Any, int]:
    """The run undisturbed, then again with the worker that claims its first ``stage``
    killed (its pool child or the whole worker) once it holds it: both results, and the
    victim's index in the fleet."""
    undisturbed = on_fleet(run, workspace)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(
        result=on_fleet(run, workspace)), daemon=True)
    thread.start()
    r = redis.Redis.from_url(redis_server.url)
    node, pool_pid = wait_for_claim(r, undisturbed.run_id, stage)
    index = [n.replace("%h", "") for n in fleet.nodes].index(node.split("@")[0] + "@")
    master = fleet.procs[index]
    if victim == "pool_child":
        assert pool_pid != master.pid
        os.kill(pool_pid, signal.SIGKILL)
    else:
        os.killpg(master.pid, signal.SIGKILL)
    thread.join(120)
    assert not thread.is_alive(), "the run did not finish after the kill"
    return undisturbed, outcome["result"], index


@pytest.mark.live
@pytest.mark.parametrize(("victim", "fuse"), [("pool_child", True), ("whole_worker", False)])
def test_worker_killed_mid_batch_loses_nothing(victim: str, fuse: bool, workspace: Config,
                                               fleet: LocalWorkers, redis_server: RedisServer,
                                               tmp_path: Path) -> None:
    run = {**SLOW, "batching": {**SLOW["batching"], "fuse": fuse}}
    undisturbed, disturbed, index = killed_mid_run(
        run, workspace, fleet, redis_server, "fused" if fuse else "evaluate", victim)
    master = fleet.procs[index]
    same_numbers(disturbed, undisturbed)
    assert disturbed.samples == 160_000 and disturbed.iterations == 4
    survivor = fleet.procs[1 - index]
    assert survivor.poll() is None
    if victim == "pool_child":
        assert master.poll() is None  # the worker master lives on with a fresh pool child
    else:
        assert master.wait(5) == -signal.SIGKILL
        log = tmp_path / "fleet" / f"{fleet.nodes[1 - index].split('@')[0]}.log"
        assert "'attempt': 1" in log.read_text()  # re-sent by the coordinator, not by Redis
        run = mainboard.run(disturbed.run_id, workspace)  # said in its log and its timeline
        resent = [x for x in run.logs(level="warn") if "re-sent as attempt 1" in x.message]
        assert resent and {x.worker for x in resent} == {"coordinator"}
        assert "resend" in [e.kind for e in run.timeline()]


# ----- live: a worker killed mid-bundle -------------------------------------------------------

BUNDLED_SLOW = slow_spec(0.1, name="slow-bundles", stop={"max_samples": 240_000},
                         batching={"batches_per_iteration": 8, "max_bundle": 4})


@pytest.mark.live
@pytest.mark.parametrize("victim", ["pool_child", "whole_worker"])
def test_worker_killed_mid_bundle_loses_nothing(victim: str, workspace: Config,
                                                fleet: LocalWorkers, redis_server: RedisServer,
                                                tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """3 iterations of 8 batches of 0.1 s in bundles of 4 (0.4 s) on 2 workers; one is
    killed while it holds a bundle. The bundle goes out again whole and every batch counts
    once: the numbers are the undisturbed run's."""
    monkeypatch.setattr(bundles, "TARGET_S", 10.0)  # bundles of max_bundle, for the kill
    undisturbed, disturbed, index = killed_mid_run(BUNDLED_SLOW, workspace, fleet, redis_server,
                                                   "fused", victim)
    same_numbers(disturbed, undisturbed)
    assert disturbed.samples == 240_000 and disturbed.iterations == 3
    if victim == "whole_worker":
        log = tmp_path / "fleet" / f"{fleet.nodes[1 - index].split('@')[0]}.log"
        assert "'attempt': 1" in log.read_text()  # re-sent by the coordinator, whole


@pytest.mark.live
def test_run_fails_clearly_when_all_its_local_workers_are_gone(workspace: Config,
                                                              redis_server: RedisServer) -> None:
    run = slow_spec(0.3, name="orphaned", stop={"max_samples": 160_000})
    failure: list[BaseException] = []

    def target() -> None:
        try:
            mainboard.integrate(run, workers=1, config=workspace)
        except IntegrationFailed as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    r = redis.Redis.from_url(redis_server.url)
    _node, pool_pid = wait_for_claim(r, load_spec(run).run_id(), "fused")
    master = int(Path(f"/proc/{pool_pid}/stat").read_text().rpartition(")")[2].split()[1])
    os.killpg(master, signal.SIGKILL)  # the worker this run started, as a node failure would
    thread.join(60)
    assert failure, "the run did not fail"
    assert "all 1 local workers exited" in str(failure[0])
    assert str(workspace.state_dir / "workers") in str(failure[0])


# ----- liveness decisions, on a manual clock ------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_expired_claim_without_progress_means_a_dead_worker() -> None:
    clock = Clock()
    live = Liveness(Timing(), clock=clock)
    live.sent(0, 0)
    live.sent(1, 0)
    assert live.update({(0, 0): True, (1, 0): True}, {}) == []
    clock.now += 2
    assert live.update({(0, 0): False, (1, 0): True}, {}) == [
        (0, "its worker stopped heartbeating")]
    assert live.next_number(0) == 1


def test_a_message_overtaken_by_later_batches_was_lost() -> None:
    """FIFO queues: once batches sent later have moved for a while, an unmoved one is gone."""
    clock = Clock()
    live = Liveness(Timing(), clock=clock)
    for batch in range(3):
        live.sent(batch, 0)
    live.update({(1, 0): True}, {(2, 0): 1})  # 1 runs, 2 finished its instant first stage
    clock.now += FIFO_GRACE_S / 2
    assert live.update({(1, 0): True}, {(2, 0): 1}) == []  # within the grace period
    clock.now += FIFO_GRACE_S
    assert live.update({(1, 0): True}, {(2, 0): 1}) == [
        (0, "overtaken by later batches (its message was lost)")]


def test_claim_released_by_a_finished_stage_is_not_a_death() -> None:
    clock = Clock()
    live = Liveness(Timing(), clock=clock)
    live.sent(0, 0)
    live.update({(0, 0): True}, {})
    clock.now += 1
    assert live.update({(0, 0): False}, {(0, 0): 1}) == []  # handed on to its next stage
    assert live.watched()[0].state == "queued"


def test_never_started_batch_is_resent_after_an_adaptive_deadline() -> None:
    clock = Clock()
    timing = Timing()
    live = Liveness(timing, clock=clock)
    for batch in range(3):
        live.sent(batch, 0)
    live.update({(0, 0): True}, {})  # a worker exists: batch 0 runs
    clock.now += 4
    live.finished(0)
    assert timing.batch_s == pytest.approx(4.0)
    clock.now += QUEUE_FLOOR_S - 1
    assert live.update({(1, 0): True}, {}) == []
    deadline = timing.queue_deadline(1)
    assert deadline > QUEUE_FLOOR_S  # 4 x 4 s x (1 + 1 queued / 1 worker)
    clock.now += deadline
    assert [b for b, _ in live.update({(1, 0): True}, {})] == [2]


def test_straggler_gets_a_duplicate_when_nothing_waits() -> None:
    clock = Clock()
    timing = Timing(batch_s=1.0, workers=2)
    live = Liveness(timing, clock=clock)
    live.sent(0, 0)
    live.update({(0, 0): True}, {})
    clock.now += timing.straggler_after() + 1
    assert [b for b, _ in live.update({(0, 0): True}, {})] == [0]
    live.sent(0, 1)
    clock.now += 60  # one duplicate is enough while both live
    assert live.update({(0, 0): True, (0, 1): True}, {}) == []


def test_a_batch_that_keeps_killing_workers_fails_the_run() -> None:
    clock = Clock()
    live = Liveness(Timing(), clock=clock, max_attempts=2)
    for attempt in range(2):
        live.sent(0, attempt)
        live.update({(0, attempt): True}, {})
        clock.now += 1
    with pytest.raises(LostBatch, match="batch 0 was lost 2 times"):
        live.update({(0, 0): False, (0, 1): False}, {})


def test_a_known_worker_death_shortens_the_wait_for_queued_attempts_to_3_s() -> None:
    """The dead worker may have held a queued message (Redis would restore it only after the
    visibility timeout): once a death is known, queued attempts older than it are re-sent
    after DEATH_FLOOR_S, not QUEUE_FLOOR_S; attempts sent after the death keep the floor."""
    clock = Clock()
    live = Liveness(Timing(batch_s=0.1, workers=2), clock=clock)
    live.sent(0, 0)
    live.update({}, {})
    clock.now += 0.5
    live.worker_died()
    live.sent(1, 0)  # sent after the death: no worker it could have reached died since
    clock.now += DEATH_FLOOR_S - 1
    assert live.update({}, {}) == []
    clock.now += 1  # 3 s after the death was known; far below the 15 s floor
    assert live.update({}, {}) == [(0, "not started, and a worker died meanwhile")]
    assert DEATH_FLOOR_S < QUEUE_FLOOR_S


@pytest.mark.live
def test_deaths_are_noticed_from_exited_local_workers_and_stale_fleet_heartbeats(
        redis_server: RedisServer) -> None:
    r = redis.Redis.from_url(redis_server.url)
    now = [1000.0]
    exited = [0]
    r.zadd(keys.workers_index(), {"mb-a@h": 995.0, "mb-b@h": 999.0})
    deaths = Deaths(r, exited=lambda: exited[0], stale_s=15.0, every_s=0.0,
                    clock=lambda: now[0])
    try:
        assert not deaths.poll()  # first look: both beat within 15 s
        assert deaths.alive >= 2  # (the session's Redis may hold other tests' workers too)
        now[0] = 1012.0  # mb-a last beat 17 s ago: its heartbeat stopped
        assert deaths.poll()
        assert not deaths.poll()  # known once
        exited[0] = 1  # a local worker process exited
        assert deaths.poll()
    finally:
        r.zrem(keys.workers_index(), "mb-a@h", "mb-b@h")


@pytest.mark.live
def test_a_worker_whose_retire_time_has_come_counts_as_gone_while_it_still_beats(
        redis_server: RedisServer) -> None:
    """Issue 19 (bench_recovery, walltime): a retiring worker held a message it never
    started until SLURM ended its job; it still beat, so its batch waited 15 s, not 3."""
    r = redis.Redis.from_url(redis_server.url)
    now = [1000.0]
    r.zadd(keys.workers_index(), {"mb-r@h": 999.0, "mb-s@h": 999.0})
    r.hset(keys.worker("mb-r@h"), mapping={"beat": 999.0, "retire_at": "1005.0"})
    r.hset(keys.worker("mb-s@h"), mapping={"beat": 999.0, "retire_at": "bad"})
    deaths = Deaths(r, stale_s=15.0, every_s=0.0, clock=lambda: now[0])
    try:
        assert not deaths.poll()
        alive = deaths.alive
        now[0] = 1005.0  # both still beating; mb-r's retire time has come
        r.zadd(keys.workers_index(), {"mb-r@h": 1004.5, "mb-s@h": 1004.5})
        assert deaths.poll() and deaths.alive == alive - 1
        assert not deaths.poll()  # known once
    finally:
        r.zrem(keys.workers_index(), "mb-r@h", "mb-s@h")
        r.delete(keys.worker("mb-r@h"), keys.worker("mb-s@h"))


@pytest.mark.parametrize("when", [15.1, 60.0, 600.0, 3600.0])
def test_a_lost_hand_off_is_resent_within_60_s_even_if_no_claim_was_ever_seen(
        when: float) -> None:
    """Issue 19: a batch whose stage finished but whose next-stage message was lost (broker
    restart between ack and publish) was never re-sent while no poll had seen a claim."""
    clock = Clock()
    timing = Timing()
    live = Liveness(timing, clock=clock)
    live.sent(4, 0)
    start = clock.now
    assert live.update({(4, 0): False}, {(4, 0): 2}) == []  # handed on, never seen claimed
    assert timing.moved and timing.workers >= 1  # a finished stage proves a worker exists
    clock.now = start + when
    assert [b for b, _ in live.update({(4, 0): False}, {(4, 0): 2})] == [4]


def test_heartbeating_fleet_workers_make_the_queue_deadline_apply() -> None:
    clock = Clock()
    timing = Timing()
    live = Liveness(timing, clock=clock)
    live.sent(0, 0)
    clock.now += QUEUE_FLOOR_S + 1
    assert live.update({}, {}) == []  # no worker anywhere: waiting is right, not re-sending
    live.workers_alive(2)
    assert [b for b, _ in live.update({}, {})] == [0]
    assert not timing.moved  # the run's idle warning still says no batch started


def test_a_batch_that_kills_its_worker_3_times_fails_the_run_naming_it() -> None:
    clock = Clock()
    live = Liveness(Timing(), clock=clock)  # MAX_ATTEMPTS (6) is not what stops it
    for attempt in range(2):
        live.sent(7, attempt)
        live.update({(7, attempt): True}, {})
        clock.now += 1
        assert [b for b, _ in live.update({(7, attempt): False}, {})] == [7]
    live.sent(7, 2)
    live.update({(7, 2): True}, {})
    clock.now += 1
    with pytest.raises(LostBatch, match="batch 7 killed its worker 3 times"):
        live.update({(7, 2): False}, {})


def test_workers_lost_between_batches_do_not_count_against_a_batch() -> None:
    """Preemption of an idle worker: queued attempts are re-sent, never failing the run."""
    clock = Clock()
    live = Liveness(Timing(batch_s=0.1, workers=2), clock=clock)
    for attempt in range(5):
        live.sent(3, attempt)
        live.worker_died()
        clock.now += DEATH_FLOOR_S + 1
        assert [b for b, _ in live.update({}, {})] == [3]
