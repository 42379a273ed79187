"""The autoscaler's policy (issue 19), pure: made-up pool views, no clock, no scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest

from mainboard.config import PoolConfig
from mainboard.fleet.scaling import PAUSE_AFTER, Alloc, PoolView, decide, lead_time, target
from tests.support.cliserver import run_mainboard


def pool(**keys: object) -> PoolConfig:
    return PoolConfig.model_validate({"host": "hpc", "max_jobs": 4, "backlog": 2,
                                      "idle_timeout": 60, **keys})


def running(n: int, active: int = 1, idle_s: float = 0.0, start: int = 0) -> list[Alloc]:
    return [Alloc(f"r{i}", "running", active, idle_s) for i in range(start, start + n)]


def pending(n: int) -> list[Alloc]:
    return [Alloc(f"p{i}", "pending") for i in range(n)]


def test_work_waiting_submits_within_max_jobs_and_backlog() -> None:
    (d,) = decide(PoolView("cpu", pool(), queue_depth=200))
    assert (d.action, d.count, d.target) == ("submit", 2, 4)  # backlog 2 of max_jobs 4
    (d,) = decide(PoolView("cpu", pool(), pending(2), queue_depth=200))
    assert d.action == "hold" and "backlog 2: 2 allocation(s) pending" in d.reason
    assert decide(PoolView("cpu", pool(), [*running(3), *pending(1)], queue_depth=200)) == []
    # 4 = max_jobs: never more running + pending
    (d,) = decide(PoolView("cpu", pool(), running(3), queue_depth=200))
    assert (d.action, d.count) == ("submit", 1)
    assert "200 task(s) queued" in d.reason


def test_the_target_is_the_work_over_one_allocations_processes() -> None:
    assert target(PoolView("cpu", pool(workers=4), queue_depth=5)) == 2
    assert target(PoolView("cpu", pool(workers=2, nodes=2), queue_depth=5)) == 2
    assert target(PoolView("cpu", pool(min_jobs=1))) == 1
    assert target(PoolView("cpu", pool(), outstanding=3)) == 3  # coordinators still wait
    assert target(PoolView("cpu", pool(), running(2, active=1))) == 2  # busy: kept


def test_idle_workers_past_idle_timeout_retire_to_zero_and_busy_ones_never() -> None:
    idle = running(2, active=0, idle_s=61)
    (d,) = decide(PoolView("cpu", pool(), idle))
    assert (d.action, d.worker_ids) == ("retire", ("r0", "r1"))
    assert decide(PoolView("cpu", pool(), running(2, active=0, idle_s=59))) == []  # not yet
    busy = running(1, active=1, start=5)
    (d,) = decide(PoolView("cpu", pool(), [*idle, *busy]))
    assert d.worker_ids == ("r0", "r1")  # r5 has a task in hand: target 1 is it
    (d,) = decide(PoolView("cpu", pool(min_jobs=1), idle))
    assert d.worker_ids == ("r0",)  # min_jobs stays


def test_pending_allocations_no_longer_needed_are_cancelled_first() -> None:
    (d,) = decide(PoolView("cpu", pool(), [*running(1, active=1), *pending(2)], queue_depth=0))
    assert (d.action, d.worker_ids) == ("cancel", ("p0", "p1"))


def test_three_failed_submissions_pause_the_pool_with_one_line() -> None:
    assert decide(PoolView("cpu", pool(), queue_depth=9, failures=PAUSE_AFTER - 1))[0].action \
        == "submit"
    (d,) = decide(PoolView("cpu", pool(), queue_depth=9, failures=PAUSE_AFTER))
    assert d.action == "pause" and "mainboard fleet resume-pool cpu" in d.reason
    assert "\n" not in d.reason
    assert decide(PoolView("cpu", pool(), queue_depth=9, failures=3, paused=True)) == []


def test_a_provider_pool_stays_within_max_usd_hr_and_budget_usd() -> None:
    priced = pool(max_usd_hr=4, walltime="1h")
    (d,) = decide(PoolView("gpu", priced, queue_depth=50, usd_hr=3.60))
    assert (d.action, d.count) == ("submit", 1)  # a second would be $7.20/h
    (d,) = decide(PoolView("gpu", priced, running(1), queue_depth=50, usd_hr=3.60,
                           rented_usd_hr=3.60))
    assert d.action == "hold" and "max_usd_hr 4" in d.reason
    budget = pool(budget_usd=10, walltime="1h")
    (d,) = decide(PoolView("gpu", budget, queue_depth=50, usd_hr=3.60, spent_usd=5.0))
    assert (d.action, d.count) == ("submit", 1)  # $5 + $3.60 fits, $5 + $7.20 does not
    (d,) = decide(PoolView("gpu", budget, queue_depth=50, usd_hr=3.60, spent_usd=7.0))
    assert d.action == "hold" and "budget_usd 10" in d.reason


def test_the_price_limit_is_the_offers_rented_plus_the_next_offer() -> None:
    """Spend per hour is what the rented offers cost (their receipts), not allocations
    times a price; one more is judged on the offer it would rent, one rental per look."""
    limit = pool(max_usd_hr=1.5, backlog=4)
    (d,) = decide(PoolView("gpu", limit, queue_depth=50, usd_hr=0.40))
    assert (d.action, d.count) == ("submit", 1)  # one at a time: the next price is asked anew
    (d,) = decide(PoolView("gpu", limit, running(1), queue_depth=50, usd_hr=0.80,
                           rented_usd_hr=0.40))
    assert (d.action, d.count) == ("submit", 1)  # $0.40 + $0.80 = $1.20 <= $1.50
    (d,) = decide(PoolView("gpu", limit, running(2), queue_depth=50, usd_hr=1.60,
                           rented_usd_hr=1.20))
    assert d.action == "hold" and d.reason.endswith(
        "max_usd_hr 1.5: 2 allocation(s) rented at $1.20/h, the next offer costs $1.60/h")
    (d,) = decide(PoolView("gpu", limit, running(3), queue_depth=50, usd_hr=0.40,
                           rented_usd_hr=1.00))
    assert (d.action, d.count) == ("submit", 1)  # a cheap offer came back: it fits


def test_a_fixed_pool_keeps_its_count_replacing_the_lost_and_never_shrinks() -> None:
    fixed = PoolConfig.model_validate({"host": "hpc", "jobs": 3})
    (d,) = decide(PoolView("cpu", fixed, running(2, active=0, idle_s=9999)))
    assert (d.action, d.count, d.target) == ("submit", 1, 3)  # one was lost: replaced
    assert decide(PoolView("cpu", fixed, running(3, active=0, idle_s=9999))) == []
    assert decide(PoolView("cpu", fixed, running(5, active=0, idle_s=9999), jobs=5)) == []
    assert decide(PoolView("cpu", fixed, [*running(1), *pending(1)], jobs=1)) == []


def test_a_worker_near_its_walltime_is_replaced_early_enough_to_overlap() -> None:
    """Its replacement is submitted once the worker retires within the pool's lead time
    (the slowest recent queue wait, with margin), so it runs before the old one drains."""
    lead = lead_time([20.0, 30.0])
    assert lead == 30.0 * 1.5 + 5
    fixed = PoolConfig.model_validate({"host": "hpc", "jobs": 1})
    busy = [Alloc("old", "running", active=1, idle_s=0, left_s=lead + 10)]
    assert decide(PoolView("cpu", fixed, busy, lead_s=lead)) == []  # not yet
    busy = [Alloc("old", "running", active=1, idle_s=0, left_s=lead - 1)]
    (d,) = decide(PoolView("cpu", fixed, busy, lead_s=lead))
    assert (d.action, d.count) == ("submit", 1)
    both = [*busy, Alloc("new", "pending")]
    assert decide(PoolView("cpu", fixed, both, lead_s=lead)) == []  # one replacement only
    (d,) = decide(PoolView("cpu", pool(), busy, queue_depth=0, lead_s=lead))
    assert d.action == "submit"  # autoscaled: its task in hand still needs a worker after it
    idle = [Alloc("old", "running", active=0, idle_s=5, left_s=lead - 1)]
    assert decide(PoolView("cpu", pool(), idle, lead_s=lead)) == []  # no work: no successor
    assert lead_time([]) == 60.0


def test_time_left_is_the_workers_own_retire_clock_when_it_said_one() -> None:
    """A SLURM worker records when it retires (its allocation's end from squeue minus
    retire-before); the worker's start plus walltime is later by its boot, so the
    replacement would come late. Without the record, that estimate is what is left."""
    from mainboard.fleet.autoscale import _left
    from mainboard.receipts import WorkerStarted

    worker = WorkerStarted(worker_id="w", host="hpc", kind="slurm", node="mb-hpc", queues=[],
                           concurrency=1, job={"spec": {"walltime": 180}}, root="/r",
                           python="py", broker_via="direct", secret_path="/s")
    limited = pool(walltime="3m", retire_before="60s")
    assert _left(worker, limited, {"retire_at": "1100.0"}, began=1010.0, now=1000.0) == 100.0
    assert _left(worker, limited, {}, began=1010.0, now=1000.0) == 130.0  # 1010 + 180 - 60
    assert _left(worker, limited, {}, began=None, now=1000.0) is None


def test_each_rental_of_a_provider_host_is_synced_with_a_manifest_of_its_own(
        tmp_path: Path) -> None:
    """Rentals share their host's name and root, not their disks: a run syncs every one,
    each against what that machine holds (a shared manifest left all but one stale)."""
    from mainboard.config import load_config
    from mainboard.fleet.sync import machines
    from mainboard.receipts import WorkerStarted
    from mainboard.statedir import manifest_path

    def worker(worker_id: str, host: str, rental: str | None) -> WorkerStarted:
        return WorkerStarted(
            worker_id=worker_id, host=host, kind="provider" if rental else "ssh", node=worker_id,
            queues=[], concurrency=1, job={}, root="/r", python="python3", broker_via="tunnel",
            secret_path="/s", rental={"provider": "sim", "rental_id": rental} if rental else None)

    found = machines([worker("a", "gpu", "r1"), worker("b", "gpu", "r2"),
                      worker("c", "lo", None), worker("d", "lo", None)])
    assert sorted(found) == [("gpu", "/r", "r1"), ("gpu", "/r", "r2"), ("lo", "/r", None)]
    (tmp_path / "mainboard.toml").write_text("")
    config = load_config(tmp_path / "mainboard.toml")
    state = config.state_dir
    paths = {manifest_path(state, "gpu", "r1"), manifest_path(state, "gpu", "r2"),
             manifest_path(state, "gpu")}
    assert len(paths) == 3 and manifest_path(state, "a/b", "c d").name == "a%2Fb@c%20d.json"


def test_a_pool_whose_walltime_may_be_chosen_asks_enough_for_the_time_needs_waiting() -> None:
    """``max_walltime``: the largest time_request queued plus retire_before, in whole
    minutes, between walltime and max_walltime; a pool without it keeps its walltime."""
    from mainboard.fleet.scaling import walltime_for

    ranged = pool(walltime="10m", max_walltime="2h", retire_before="60s")
    (d,) = decide(PoolView("cpu", ranged, queue_depth=1, need_s=3000.0))
    assert (d.action, d.walltime) == ("submit", 3060)  # 3000 + 60: 51 min
    assert "walltime 3060 s for a 3000 s time need" in d.reason
    (d,) = decide(PoolView("cpu", ranged, queue_depth=1, need_s=30.0))
    assert d.walltime == 600 and "time need" not in d.reason  # the floor: walltime
    assert walltime_for(ranged, 99999.0) == 7200  # never past max_walltime
    assert walltime_for(ranged, None) == 600
    assert walltime_for(pool(walltime="10m"), 3000.0) == 600  # no range: as declared
    assert walltime_for(pool(max_walltime="1h"), 100.0) == 420  # 100 + 300 default -> 7 min


def test_a_walltime_above_max_walltime_names_both(tmp_path: Path) -> None:

    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="walltime 7200 s is above max-walltime 3600 s"):
        pool(walltime="2h", max_walltime="1h")
    (tmp_path / "mainboard.toml").write_text(
        '[fleet.pools.p]\nhost = "local"\nwalltime = "2h"\nmax-walltime = "1h"\n')
    done = run_mainboard(["fleet", "status"], cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().endswith("mainboard.toml:3: fleet.pools.p.walltime: walltime "
                                        "7200 s is above max-walltime 3600 s (got 7200); "
                                        "valid: walltime <= max-walltime"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_worker_idle_past_stall_after_while_work_waits_is_restarted_and_replaced() -> None:
    fixed = pool(max_jobs=None, jobs=2)
    stuck = Alloc("s", "running", 0, 130.0)
    view = PoolView("cpu", fixed, [stuck, *running(1)], queue_depth=7, stall_after=120)
    restart, submit = decide(view)
    assert (restart.action, restart.worker_ids) == ("restart", ("s",))
    assert "no task started for 120 s (stall_after) while 7 task(s) waited" in restart.reason
    assert (submit.action, submit.count) == ("submit", 1)  # its replacement, at once
    # not stalled: nothing waits, a task in hand, not idle long enough, retiring, no setting
    for quiet in (PoolView("cpu", fixed, [stuck], queue_depth=0, stall_after=120),
                  PoolView("cpu", fixed, [Alloc("s", "running", 1, 130.0)], queue_depth=7,
                           stall_after=120),
                  PoolView("cpu", fixed, [Alloc("s", "running", 0, 119.0)], queue_depth=7,
                           stall_after=120),
                  PoolView("cpu", fixed, [Alloc("s", "running", 0, 130.0, left_s=10.0)],
                           queue_depth=7, stall_after=120),
                  PoolView("cpu", fixed, [stuck], queue_depth=7)):
        assert all(d.action != "restart" for d in decide(quiet)), quiet


def test_stall_after_is_the_pools_own_else_the_fleets() -> None:
    from mainboard.config import FleetConfig

    fleet = FleetConfig.model_validate({"stall_after": "5m", "pools": {
        "a": {"host": "hpc"}, "b": {"host": "hpc", "stall-after": "30s"}}})
    assert (fleet.stall_of(fleet.pools["a"]), fleet.stall_of(fleet.pools["b"])) == (300, 30)
    assert FleetConfig().stall_after == 120
