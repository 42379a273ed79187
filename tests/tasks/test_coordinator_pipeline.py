"""Iterations sent ahead: the next iteration of a sampler that does not learn goes out before
the one in hand is merged, the numbers stay the local driver's, an unused one leaves no key.

Live tests: a real redis-server and two real `celery worker` subprocesses; which iterations
went out ahead is read from the coordinator's own launches (a spy on ``Launcher.launch``).
The receipt writer's order and its errors are checked without services. (A coordinator
killed while an iteration is out ahead: tests/tasks/test_coordinator_runs.py, whose slow run has
a naive sampler.)
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import mainboard
from mainboard import keys
from mainboard.config import Config
from mainboard.integrators.driver import integrate_local
from mainboard.receipts import RunPaused
from mainboard.redisclient import redis_client
from mainboard.runs.store import RunStore
from mainboard.tasks import pipeline
from tests.support.integration import (
    GAUSS_4D,
    module_fixtures,
    same_numbers,
    slow_spec,
    spec,
)
from tests.support.killed_runs import kill_after, resume_matches

workspace, fleet = module_fixtures(2)
NAIVE = spec(GAUSS_4D, name="ahead", sampler={"kind": "naive"},
             stop={"max_samples": 50_000},
             batching={"batch_size": 2_000, "batches_per_iteration": 5})


def spied(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """(iteration, sent ahead) of every launch the coordinator makes from now on."""
    launches: list[tuple[int, bool]] = []
    original = pipeline.Launcher.launch

    def spy(self: Any, k: int, sizes: list[int], sampler: bytes, ahead: bool = False) -> Any:
        launches.append((k, ahead))
        return original(self, k, sizes, sampler, ahead)

    monkeypatch.setattr(pipeline.Launcher, "launch", spy)
    return launches


@pytest.mark.live
def test_a_naive_run_sends_each_next_iteration_ahead_with_the_local_numbers(
        workspace: Config, fleet: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    launches = spied(monkeypatch)
    result = mainboard.integrate(NAIVE, workers=0, config=workspace)
    same_numbers(result, integrate_local(NAIVE))
    assert result.iterations == 5
    # the first two iterations are sent when due (bundles are sized from the batches the
    # first one measured), each later one ahead, once (none after the last)
    assert launches == [(0, False), (1, False), (2, True), (3, True), (4, True)]


@pytest.mark.live
def test_without_pipelining_with_a_learning_sampler_or_chained_nothing_goes_ahead(
        workspace: Config, fleet: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    launches = spied(monkeypatch)
    monkeypatch.setenv(pipeline.PIPELINE_ENV, "0")
    off = spec(NAIVE, name="not-ahead")
    same_numbers(mainboard.integrate(off, workers=0, config=workspace), integrate_local(off))
    assert launches == [(k, False) for k in range(5)]
    monkeypatch.delenv(pipeline.PIPELINE_ENV)
    for run in (spec(NAIVE, name="learning", sampler={"kind": "vegas", "bins": 16}),
                spec(NAIVE, name="chained", batching={"fuse": False})):
        launches.clear()
        same_numbers(mainboard.integrate(run, workers=0, config=workspace),
                     integrate_local(run))
        assert launches == [(k, False) for k in range(5)], run["name"]


@pytest.mark.live
def test_an_error_target_met_leaves_the_iteration_sent_ahead_unused_and_gone(
        workspace: Config, fleet: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    launches = spied(monkeypatch)
    run = spec(NAIVE, name="target", stop={"max_samples": 400_000, "relative_error": 0.02})
    result = mainboard.integrate(run, workers=0, config=workspace)
    same_numbers(result, integrate_local(run))
    assert result.stop_reason == "relative_error" and result.iterations < 40
    assert launches[-1] == (result.iterations, True)  # sent ahead, never merged
    assert workspace.broker.url is not None
    r = redis_client(workspace.broker.url)
    left = [k for k in r.scan_iter(match=keys.run_pattern(result.run_id)) if b":it:" in k]
    claims = [k for k in left if b":claim:" in k]  # a worker's claim on a batch it started
    # each expires by itself (its store was a no-op): a time to live, or gone already (-2;
    # the claims run out 2-3 s after their task, and the local run above takes its time)
    assert all(r.pttl(k) != -1 for k in claims)
    assert [k for k in left if k not in claims] == [], left  # the unused one's keys went


@pytest.mark.live
def test_a_coordinator_killed_with_an_iteration_out_ahead_resumes_to_the_same_numbers(
        workspace: Config) -> None:
    """SIGKILL once two iterations are recorded (the fourth is then out ahead, the third
    being computed, and a receipt line may still be queued): the resume ends with the
    uninterrupted run's numbers."""
    run = slow_spec(0.25, name="ahead-killed", sampler={"kind": "naive"},
                    stop={"max_samples": 200_000})
    killed = kill_after(workspace, "ahead-killed", run, iteration=2)
    resume_matches(workspace, "ahead-killed", killed, samples=200_000, iterations=5)


# ----- the receipt writer, without services ------------------------------------------------

def test_the_receipt_writer_keeps_the_order_and_raises_what_writing_raised(
        tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    writer = pipeline.ReceiptWriter(store)
    for i in range(50):
        writer.record(RunPaused(run_id="r1", iteration=i))
    writer.flush()
    assert [p.iteration for p in store.receipts("r1").read()] == list(range(50))

    class Broken:
        def record(self, payload: Any) -> None:
            raise OSError("disk full")

    broken = pipeline.ReceiptWriter(Broken())  # type: ignore[arg-type]
    broken.record(RunPaused(run_id="r1", iteration=0))
    with pytest.raises(OSError, match="disk full"):
        broken.close()


def test_a_held_receipt_writer_writes_nothing_until_released_and_a_flush_releases_it(
        tmp_path: Path) -> None:
    """The coordinator holds its writer from an iteration's record until the next
    iteration is out (encoding a VEGAS+ line holds the GIL for tens of ms); a flush or a
    close (the run ends, halts or fails) writes what waits."""
    store = RunStore(tmp_path)
    writer = pipeline.ReceiptWriter(store)
    writer.record(RunPaused(run_id="r1", iteration=0))
    writer.flush()  # the thread is up, idle
    writer.hold()
    writer.record(RunPaused(run_id="r1", iteration=1))
    while writer._queue.qsize():  # the thread took the line: now it waits for release
        threading.Event().wait(0.001)
    assert [p.iteration for p in store.receipts("r1").read()] == [0]
    writer.release()
    writer.flush()
    assert [p.iteration for p in store.receipts("r1").read()] == [0, 1]
    writer.hold()
    writer.record(RunPaused(run_id="r1", iteration=2))
    writer.flush()  # releases: never waits forever on a held line
    writer.hold()
    writer.record(RunPaused(run_id="r1", iteration=3))
    writer.close()
    assert [p.iteration for p in store.receipts("r1").read()] == [0, 1, 2, 3]
