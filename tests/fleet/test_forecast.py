"""A run's goal and forecast (issue 29, item 1), pure: the run-file keys and their bad
input, the arithmetic (samples, time, money to the target), the keeper's sizing of the
pools serving a run (cheapest first, within max_jobs and price limits), the line of an
unreachable goal, and the release of idle workers once a target is met."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from mainboard.config import PoolConfig
from mainboard.errors import ConfigError, UserError
from mainboard.fleet.forecast import MIN_ITERATIONS, Supply, plan
from mainboard.fleet.scaling import Alloc, PoolView, decide, target
from mainboard.integrators.goal import (
    allocations_needed,
    error_ratio,
    halving_samples,
    resolve_deadline,
    samples_to_target,
)
from mainboard.integrators.spec import parse_run
from mainboard.runs.forecast import forecast_lines, priced
from mainboard.tasks.goal import start_deadline

RUN = {"name": "goal", "seed": 1, "domain": {"continuous": 1},
       "integrand": {"kind": "constant"}, "stop": {"relative_error": 0.01}}
ID_ON_MAIN = "bc29927bbdb1f64a"  # RUN's id before [stop] had goal keys


def test_samples_to_target_follow_one_over_root_n() -> None:
    assert samples_to_target(1000, 2.0) == 3000  # 4x in all: 3000 more
    assert samples_to_target(1000, 1.0) == 0 and samples_to_target(1000, 0.5) == 0
    assert samples_to_target(400, 1.5) == 500  # 400 * 2.25 - 400
    assert halving_samples(1000) == 3000
    assert allocations_needed(10_000, 100.0, 50.0) == 2  # 100/s each for 50 s: 2 of them
    assert allocations_needed(10_000, 100.0, 100.0) == 1
    assert allocations_needed(0, 0.0, 0.0) == 0
    assert allocations_needed(10, 0.0, 10.0) is None and allocations_needed(10, 5.0, 0) is None


def test_the_error_ratio_takes_the_target_closer_to_being_met() -> None:
    rel = SimpleNamespace(relative_error=0.01, absolute_error=None)
    assert error_ratio(rel, 2.0, 0.04) == pytest.approx(2.0)
    assert error_ratio(rel, [2.0, -1.0], [0.02, 0.03]) == pytest.approx(3.0)  # worst component
    assert error_ratio(rel, {"real": 3.0, "imag": 4.0}, {"real": 0.3, "imag": 0.4}) == \
        pytest.approx(10.0)  # a complex value: its modulus
    both = SimpleNamespace(relative_error=0.01, absolute_error=0.1)
    assert error_ratio(both, 2.0, 0.04) == pytest.approx(0.4)  # either suffices
    assert error_ratio(rel, None, None) is None and error_ratio(rel, 0.0, 0.1) is None
    assert error_ratio(SimpleNamespace(relative_error=None, absolute_error=None), 1.0, 0.1) \
        is None


def test_deadlines_resolve_once_to_utc_and_one_in_the_past_is_refused() -> None:
    zone = timezone(timedelta(hours=2))
    now = datetime(2026, 12, 5, 17, 0, tzinfo=zone)
    assert resolve_deadline("20m", now) == datetime(2026, 12, 5, 15, 20, tzinfo=UTC)
    assert resolve_deadline("1h30m", now) - now == timedelta(minutes=90)
    local = now.astimezone()  # a time of day is in the local zone of this machine
    later = (local + timedelta(hours=1)).strftime("%H:%M")
    at = resolve_deadline(later, now)
    assert at.tzinfo == UTC and timedelta(minutes=59) <= at - now <= timedelta(hours=1)
    assert resolve_deadline("2026-12-05T19:00+02:00", now) == \
        datetime(2026, 12, 5, 17, 0, tzinfo=UTC)
    with pytest.raises(ValueError, match="is in the past"):
        resolve_deadline("2026-12-05T16:00+02:00", now)
    earlier = (local - timedelta(minutes=1)).strftime("%H:%M")
    if earlier < local.strftime("%H:%M"):  # not across midnight
        with pytest.raises(ValueError, match="in the past"):
            resolve_deadline(earlier, now)


def test_goal_keys_are_checked_and_left_out_of_run_ids_when_unset() -> None:
    plain = parse_run(dict(RUN), file="run.toml")
    assert plain.run_id() == ID_ON_MAIN
    assert "deadline" not in plain.model_dump()["stop"]
    goal = parse_run({**RUN, "stop": {"relative_error": 0.01, "deadline": "20m",
                                      "budget_usd": 5, "budget_core_hours": 2.5}})
    assert goal.stop.goal and goal.run_id() != ID_ON_MAIN
    assert goal.model_dump()["stop"]["deadline"] == "20m"
    bad = [({"relative_error": 0.01, "deadline": "soon"}, "stop.deadline: is not a duration"),
           ({"relative_error": 0.01, "deadline": "0m"}, "longer than 0 s"),
           ({"relative_error": 0.01, "deadline": "25:00"}, "stop.deadline"),
           ({"relative_error": 0.01, "budget_usd": 0}, "stop.budget_usd: must be greater than 0"),
           ({"relative_error": 0.01, "budget_core_hours": -1}, "stop.budget_core_hours"),
           ({"max_samples": 100, "deadline": "20m"}, "a goal for reaching an error target")]
    for stop, words in bad:
        with pytest.raises(ConfigError, match=words) as err:
            parse_run({**RUN, "stop": stop}, file="run.toml")
        assert "\n" not in str(err.value) and str(err.value).startswith("run.toml")


def test_the_deadline_is_resolved_at_run_start_and_a_past_one_refused() -> None:
    now = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    spec = parse_run({**RUN, "stop": {"relative_error": 0.01, "deadline": "2m"}})
    assert start_deadline(spec, "run.toml", now) == "2026-12-05T12:02:00+00:00"
    assert start_deadline(parse_run(dict(RUN)), "run.toml", now) is None
    past = parse_run({**RUN, "stop": {"relative_error": 0.01,
                                      "deadline": "2026-12-05T11:00+00:00"}})
    with pytest.raises(UserError, match=r"^run.toml: stop.deadline: deadline .* is in the past"):
        start_deadline(past, "run.toml", now)


def pool(**keys: object) -> PoolConfig:
    return PoolConfig.model_validate({"host": "hpc", "max_jobs": 4, "idle_timeout": 600, **keys})


def doc(**keys: object) -> dict:
    return {"iteration": MIN_ITERATIONS, "samples": 40_000, "samples_to_target": 360_000,
            "samples_per_s": 1000.0, "error_ratio": 3.16, "deadline": 1000.0 + 120,
            "budget_usd": None, "budget_core_hours": None, **keys}


def test_pools_are_filled_cheapest_first_within_max_jobs_and_price_limits() -> None:
    # 360k samples in 120 s: 3000/s; 1000/s per allocation on both pools
    cheap = Supply("cheap", pool(max_jobs=2), current=1, usd_hr=1.0, rate=1000.0)
    dear = Supply("dear", pool(max_jobs=4), current=0, usd_hr=3.0, rate=1000.0)
    made = plan(doc(), [dear, cheap], now=1000.0)
    assert made.jobs == {"cheap": 2, "dear": 1} and made.unmet is None
    assert made.fleet["samples_per_s"] == 1000.0  # one allocation at work now
    assert made.fleet["usd_per_sample"] == pytest.approx(1.0 / 3600 / 1000)
    # a price limit: dear's max_usd_hr pays for one allocation, so the rest misses
    capped = Supply("dear", pool(max_jobs=4, max_usd_hr=3.5), usd_hr=3.0, rate=1000.0)
    made = plan(doc(deadline=1000.0 + 60), [cheap, capped], now=1000.0)  # 6000/s wanted
    assert made.jobs == {"cheap": 2, "dear": 1}
    assert made.unmet is not None and "by the deadline" in made.unmet
    assert "3 more allocation(s) of pool cheap" in made.unmet  # 3000/s short
    assert "60 s more time at 3 allocation(s)" in made.unmet  # 360k at 3000/s: 120 s, 60 left
    # a better forecast never shrinks the pools of a running run (the same cost, sooner)
    ahead = Supply("cheap", pool(max_jobs=2), current=2, usd_hr=1.0, rate=1000.0)
    assert plan(doc(samples_to_target=1000), [ahead, dear], 1000.0).jobs == \
        {"cheap": 2, "dear": 0}
    # the target is met: the allocations at work finish the iteration, nothing grows
    assert plan(doc(samples_to_target=0), [cheap, dear], 1000.0).jobs == {"cheap": 1, "dear": 0}


def test_a_goal_run_wants_one_allocation_until_it_is_measured() -> None:
    cheap = Supply("cheap", pool(), usd_hr=1.0)
    dear = Supply("dear", pool(), usd_hr=2.0)
    made = plan(doc(iteration=1, samples_per_s=None), [dear, cheap], now=1000.0)
    assert made.jobs == {"cheap": 1, "dear": 0} and made.unmet is None
    # a budget alone does not size pools (N allocations cost what one does), but is judged
    assert plan(doc(deadline=None), [cheap], 1000.0).jobs is None


def test_a_budget_too_small_names_the_dollars_and_core_hours_missing() -> None:
    # 400k samples in all at 1000/s per allocation of $3.6/h and 4 cores: $0.40, 0.44 core-h
    rented = Supply("gpu", pool(max_jobs=8, cpus=4), current=1, usd_hr=3.6, cores=4,
                    rate=1000.0)
    made = plan(doc(deadline=None, budget_usd=0.25, budget_core_hours=0.1), [rented], 1000.0)
    assert made.unmet is not None and "\n" not in made.unmet
    assert "within budget_usd 0.25 and within budget_core_hours 0.1" in made.unmet
    assert "$0.15 more" in made.unmet and "0.34 more core-hours" in made.unmet
    assert "360,000 samples to go" in made.unmet
    assert plan(doc(deadline=None, budget_usd=1.0), [rented], 1000.0).unmet is None


def test_the_forecast_is_priced_from_the_newest_samples_to_target() -> None:
    fleet = {"samples_per_s": 2000.0, "usd_per_sample": 1e-6, "core_hours_per_sample": 2e-6}
    out = priced({"samples_to_target": 10_000, "halving_samples": 30_000}, fleet)
    assert out["time_to_target_s"] == 5.0
    assert out["usd_to_target"] == pytest.approx(0.01)
    assert out["usd_per_halving"] == pytest.approx(0.03)
    assert out["core_hours_per_halving"] == pytest.approx(0.06)
    lines = forecast_lines({"status": "running", "samples_to_target": 10_000, **out,
                            "halving_samples": 30_000, "unmet": "cannot be met: $1 more"})
    assert lines[0] == "forecast   10,000 samples to target, 5 s at the current allocations, " \
                       "$0.01, 0.02 core-h"
    assert "halving the error: $0.03" in lines[1] and lines[-1].endswith("$1 more")
    assert forecast_lines({"status": "met"}) == ["forecast   target met"]


def test_the_goal_sizes_the_pool_and_a_met_target_releases_idle_workers_now() -> None:
    idle = [Alloc("a", "running", 0, idle_s=1.0), Alloc("b", "running", 1, idle_s=0.0)]
    sized = PoolView("cpu", pool(), idle, queue_depth=40, outstanding=40, goal_jobs=3)
    assert target(sized) == 3  # not the 40 batches queued: the deadline's 3
    (d,) = decide(sized)
    assert (d.action, d.count) == ("submit", 1)
    assert target(PoolView("cpu", pool(), goal_jobs=1, other_outstanding=3)) == 3
    assert decide(PoolView("cpu", pool(), idle)) == []  # idle 1 s < idle_timeout 600 s
    (d,) = decide(PoolView("cpu", pool(), idle, release=True))
    assert (d.action, d.worker_ids) == ("retire", ("a",))  # the busy one finishes first
    assert "error target met: released now" in d.reason
