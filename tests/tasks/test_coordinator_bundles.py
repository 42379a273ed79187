"""Bundles (several batches per task) change no number and lose no batch.

Live tests: a real redis-server and real `celery worker` subprocesses; bundles on (sized by
the coordinator, or bounded by ``max_bundle``) and off (``max_bundle = 1``) give the local
driver's numbers to the last bit on 1 and 2 workers; a bundle bound larger than an
iteration (and an uneven last iteration) is cut at the iteration's end. (A worker killed mid-bundle:
tests/tasks/test_coordinator_liveness.py.) The rest checks the planning and sizing rules and the run-file knob without services.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery.signals import before_task_publish

import mainboard
from mainboard.config import Config
from mainboard.errors import ConfigError
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.spec import parse_run
from mainboard.integrators.stop import plan_iteration
from mainboard.tasks import bundles, dispatch
from mainboard.tasks.bundles import Bundle, Done, Sizer, parse_done, plan_bundles
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import GAUSS_4D, fleet_iter, same_numbers, spec, write_workspace
from tests.support.services import RedisServer

# 3 iterations of 6 batches of 2,000: small batches, so the coordinator bundles them.
SMALL = spec(GAUSS_4D, name="bundled", stop={"max_samples": 36_000},
             batching={"batch_size": 2_000, "batches_per_iteration": 6})


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Config:
    return write_workspace(tmp_path_factory.mktemp("ws"), redis_server)


@pytest.fixture(scope="module")
def fleet(workspace: Config, redis_server: RedisServer,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorkers]:
    yield from fleet_iter(2, redis_server, tmp_path_factory.mktemp("fleet"))


# ----- live: numbers -------------------------------------------------------------------------

@pytest.mark.live
@pytest.mark.parametrize("max_bundle", [None, 1, 4], ids=["auto", "off", "at-most-4"])
def test_bundling_on_or_off_gives_the_local_numbers_on_two_workers(
        workspace: Config, fleet: LocalWorkers, max_bundle: int | None) -> None:
    run = spec(SMALL, batching={"max_bundle": max_bundle} if max_bundle else {})
    local = integrate_local(run)
    result = mainboard.integrate(run, workers=0, config=workspace)
    same_numbers(result, local)
    assert result.samples == 36_000 and result.iterations == 3


@pytest.mark.live
def test_a_bundle_message_carries_a_short_args_repr_for_flower(
        workspace: Config, fleet: LocalWorkers) -> None:
    """The coordinator names a bundle's arguments itself (Celery's ``saferepr`` of the
    message cost ~1 ms a bundle): what Flower's task list shows, from the real publish."""
    seen: list[dict[str, Any]] = []

    def record(sender: str = "", headers: dict[str, Any] | None = None, **_: Any) -> None:
        if sender.endswith(".bundle") and headers:
            seen.append(headers)

    before_task_publish.connect(record, weak=False)
    try:
        result = mainboard.integrate(spec(SMALL, name="bundled-repr"), workers=0,
                                     config=workspace)
    finally:
        before_task_publish.disconnect(record)
    assert result.samples == 36_000 and seen
    first = seen[0]
    assert first["argsrepr"].startswith(f"(run {result.run_id}, iteration 1, batches 0..")
    assert first["kwargsrepr"] == "{}" and len(first["argsrepr"]) < 100
    assert all(h["argsrepr"].endswith(" of them)") for h in seen)


@pytest.mark.live
def test_bundles_on_one_worker_give_the_local_numbers(workspace: Config) -> None:
    run = spec(SMALL, name="bundled-one", batching={"max_bundle": 3})
    same_numbers(mainboard.integrate(run, workers=1, config=workspace), integrate_local(run))


@pytest.mark.live
def test_bundles_never_straddle_an_iteration_end(workspace: Config,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """max_bundle larger than an iteration, and a last iteration of fewer batches, on one
    worker (so one bundle may take a whole iteration): every bundle the coordinator sends is
    cut from one iteration's batches, and the numbers are the local driver's."""
    run = spec(SMALL, name="straddle", stop={"max_samples": 26_000},
               batching={"batches_per_iteration": 5, "max_bundle": 8})
    sent: list[tuple[int, tuple[int, ...], int]] = []
    original = dispatch.Dispatch._send_bundle

    def spy(self: Any, k: int, unit: Bundle, sizes: Any, attempt: int) -> None:
        sent.append((k, unit.members, len(sizes)))
        original(self, k, unit, sizes, attempt)

    monkeypatch.setattr(dispatch.Dispatch, "_send_bundle", spy)
    monkeypatch.setattr(bundles, "TARGET_S", 60.0)  # time alone would allow any size
    result = mainboard.integrate(run, workers=1, config=workspace)
    same_numbers(result, integrate_local(run))
    assert result.samples == 26_000
    per_iteration: dict[int, list[int]] = {}
    for k, members, count in sent:
        assert members and all(0 <= b < count for b in members)
        assert len(members) <= 8
        per_iteration.setdefault(k, []).extend(members)
    assert sorted(per_iteration) == [0, 1, 2]
    for members in per_iteration.values():
        assert sorted(members) == list(range(len(members)))  # each batch once, no other's
    # one worker known: each iteration went out as one bundle, the last one of 3 batches
    assert [members for _, members, _ in sent] == [(0, 1, 2, 3, 4)] * 2 + [(0, 1, 2)]


# ----- planning, sizing, the run-file knob ---------------------------------------------------

def test_plan_cuts_pending_batches_in_index_order() -> None:
    assert plan_bundles([5, 0, 1, 2, 7], 2) == [Bundle((0, 1)), Bundle((2, 5)), Bundle((7,))]
    assert [len(b.members) for b in plan_bundles(range(10), 4)] == [4, 3, 3]  # evened out
    assert plan_bundles([], 3) == []
    assert plan_bundles([3], 0) == [Bundle((3,))]


def test_plan_gives_every_worker_slot_the_same_share_of_an_iteration() -> None:
    """Bundles of at most 2 for 10 batches on 2 slots: 6 bundles, 5 batches per slot as
    they pull them in turn, the shortest last (not 2,2,2,2,2: 6 against 4)."""
    plan = plan_bundles(range(10), 2, workers=2)
    assert [len(b.members) for b in plan] == [2, 2, 2, 2, 1, 1]
    assert [m for b in plan for m in b.members] == list(range(10))
    assert sum(len(b.members) for b in plan[0::2]) == sum(len(b.members) for b in plan[1::2])
    assert plan_bundles(range(10), 5, workers=2) == [Bundle((0, 1, 2, 3, 4)),
                                                     Bundle((5, 6, 7, 8, 9))]
    assert [len(b.members) for b in plan_bundles(range(3), 2, workers=4)] == [1, 1, 1]


def test_each_iteration_of_a_run_is_cut_on_its_own() -> None:
    """Iterations of 5 batches and an uneven last one, bundles of at most 8: one bundle per
    iteration, never more than the iteration holds."""
    run = parse_run(spec(SMALL, stop={"max_samples": 26_000},
                         batching={"batches_per_iteration": 5, "max_bundle": 8}))
    sizer, plans, samples = Sizer(max_bundle=8, per_batch_s=1e-6), [], 0
    while (sizes := plan_iteration(run.stop, run.batching, samples)):
        plans.append((len(sizes), plan_bundles(range(len(sizes)),
                                               sizer.size(len(sizes), 2000, 1))))
        samples += sum(sizes)
    assert [count for count, _ in plans] == [5, 5, 3]
    assert [[b.members for b in p] for _, p in plans] == [
        [(0, 1, 2, 3, 4)], [(0, 1, 2, 3, 4)], [(0, 1, 2)]]


def test_sizer_aims_at_the_target_time_and_gives_every_worker_a_share() -> None:
    sizer = Sizer()
    assert sizer.size(400, 2000) == 50  # nothing seen yet: 8 workers assumed
    sizer.record(Done((0, 1, 2, 3), 0.004, "w1"))  # 1 ms per batch
    sizer.record(Done((4, 5), 0.002, "w2"))
    assert sizer.size(1000, 2000) == round(bundles.TARGET_S / 0.001)  # TARGET_S of work a task
    assert sizer.size(20, 2000) == 10  # two slots seen: half the iteration each
    assert sizer.size(20, 2000, known_workers=4) == 5
    assert sizer.seen(0) == 2 and sizer.seen(3) == 3
    sizer.next_iteration()
    sizer.next_iteration()  # neither slot seen for two iterations: forgotten
    assert sizer.workers(0) == bundles.UNKNOWN_WORKERS and sizer.seen(0) == 0
    assert Sizer(max_bundle=3, per_batch_s=1e-5).size(400, 2000, 2) == 3
    assert Sizer(per_batch_s=5.0).size(400, 2000, 2) == 1  # slow batches: one per task


def test_done_entries() -> None:
    assert parse_done(b"7") == Done((7,))
    assert parse_done(b"3,4,5@0.012500@node@h|12|34") == Done((3, 4, 5), 0.0125, "node@h|12|34")


@pytest.mark.parametrize(("value", "why"), [
    (0, "greater than or equal to 1"), (2_000_000, "less than or equal to 1000000"),
    (1.5, "expected an integer"), (True, "expected an integer")])
def test_max_bundle_is_validated(value: Any, why: str) -> None:
    with pytest.raises(ConfigError, match=rf"batching\.max_bundle: .*{why}"):
        parse_run(spec(SMALL, batching={"max_bundle": value}))


def test_unknown_batching_key_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="unknown key 'max_bundel'; valid: batch_size, "
                                          "batches_per_iteration, fuse, max_bundle"):
        parse_run(spec(SMALL, batching={"max_bundel": 4}))


def test_unset_max_bundle_keeps_run_ids() -> None:
    """Bundling never changes the numbers: leaving it unset leaves the definition as it was."""
    plain = parse_run(SMALL)
    assert "max_bundle" not in plain.model_dump(mode="json")["batching"]
    assert parse_run(spec(SMALL, batching={"max_bundle": 4})).run_id() != plain.run_id()
