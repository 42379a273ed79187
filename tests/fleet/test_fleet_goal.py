"""Live tier: runs with a deadline and a budget on an autoscaled local pool (issue 29, item 1).

A slow integrand (0.3 s per batch, workspace module) with a relative-error target that one
allocation reaches in about a minute: with a deadline it cannot meet that way, the keeper
grows the pool once the forecast exists (after the third iteration: `runs show --json`
carries it), and releases the workers the moment the target is met (idle_timeout is 10
minutes: the stop receipts come long before). With a budget too small the run's log says
so once, naming the dollars missing. Bad goals are refused in one line before anything
starts. Real Redis (the embedded broker), real Celery workers as fleet allocations.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mainboard.fleet.autoscale import SCALE_TICK_ENV
from mainboard.fleet.records import read_fleet
from tests.support.cliserver import popen_mainboard
from tests.support.fleet_helpers import cli, config, table, tear_down, wait_until, workspace

SLOW = '''import time

import numpy as np


def slow(x, delay=0.3):
    """exp(-25 |x - 1/2|^2) after ``delay`` s per batch: a run lasts many iterations."""
    time.sleep(delay)
    return np.exp(-25.0 * ((x - 0.5) ** 2).sum(axis=1))
'''


def run_toml(name: str, **stop: Any) -> str:
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in stop.items())
    return (f'name = "{name}"\nseed = 11\n[domain]\ncontinuous = 2\n[integrand]\n'
            f'kind = "python"\ntarget = "slowgoal:slow"\n[sampler]\nkind = "naive"\n'
            f"[batching]\nbatch_size = 1000\nbatches_per_iteration = 6\n[stop]\n{lines}\n")


def goal_workspace(tmp_path: Path, max_jobs: int, **stop: Any) -> Path:
    ws = workspace(tmp_path / "ws", table("hosts.local", kind="local", usd_hr=36.0),
                   table("fleet.pools.goal", host="local", max_jobs=max_jobs,
                         idle_timeout="10m"))
    (ws / "slowgoal.py").write_text(SLOW)
    (ws / "run.toml").write_text(run_toml("goal", **stop))
    return ws


def start_run(ws: Path) -> subprocess.Popen[str]:
    import os

    return popen_mainboard(["--config",
                            str(ws / "mainboard.toml"), "integrate", "run.toml",
                            "--workers", "0", "--json"], cwd=ws, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env={**os.environ, SCALE_TICK_ENV: "0.2"})


@contextmanager
def goal_run(tmp_path: Path, max_jobs: int, **stop: Any
             ) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A goal workspace with its fleet up (no allocation yet: the pool autoscales from zero,
    ticking every 0.2 s) and its run started; after, the run killed if it still goes and the
    fleet torn down, which must succeed."""
    ws = goal_workspace(tmp_path, max_jobs, **stop)
    run = None
    try:
        up = cli(ws, "fleet", "up", "--no-flower", "--json", env={SCALE_TICK_ENV: "0.2"})
        assert up.returncode == 0 and json.loads(up.stdout)["started"] == [], up.stderr
        run = start_run(ws)
        yield ws, run
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.communicate()
        down = tear_down(ws, "--timeout", "10")
    assert down.returncode == 0, down.stderr


def forecast(ws: Path) -> dict[str, Any] | None:
    shown = cli(ws, "runs", "show", "goal", "--json")
    if shown.returncode != 0:  # not created yet
        return None
    return json.loads(shown.stdout).get("forecast")


def dashboard_run(ws: Path) -> list[str]:
    """The forecast lines of the dashboard's run page (its data, as its API serves it)."""
    from mainboard.dashboard.views import Views

    views = Views(config(ws))
    try:
        return views.run("goal")["forecast_lines"]
    finally:
        views.live.close()


def events(ws: Path, action: str) -> list:
    return [e for e in read_fleet(ws / ".mainboard").scale
            if e.pool == "goal" and e.action == action]


pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]


def test_a_goal_run_grows_its_pool_for_the_deadline_and_releases_it_once_met(
        tmp_path: Path) -> None:
    # ~170k samples to 0.42%: about a minute on one allocation, the deadline is 50 s away
    with goal_run(tmp_path, 3, relative_error=0.0042, deadline="50s",
                  max_iterations=200) as (ws, run):
        seen = wait_until(lambda: (f := forecast(ws)) and f.get("iteration", 0) >= 3
                          and f.get("usd_to_target") is not None and f, 180,
                          "the forecast after the third iteration, priced by the keeper")
        assert seen["samples_to_target"] > 0 and seen["time_to_target_s"] > 0
        assert seen["usd_to_target"] > 0 and seen["usd_per_halving"] > 0
        assert seen["core_hours_per_halving"] > 0 and seen["halving_samples"] > 0
        assert seen["deadline_utc"].endswith("+00:00") and seen["status"] == "running"
        assert seen["fleet"]["pools"]["goal"]["usd_hr"] == 36.0
        grew = wait_until(lambda: [e for e in events(ws, "submit") if e.target >= 2], 120,
                          "the pool growing to meet the deadline")
        assert "wanted for runs' deadlines" in grew[0].reason, grew
        out, err = run.communicate(timeout=240)
        assert run.returncode == 0, err
        result = json.loads(out)
        assert result["stop_reason"] == "relative_error"
        wait_until(lambda: not [w for w in read_fleet(ws / ".mainboard").live()
                                if w.pool == "goal"], 90, "every allocation stopped")
        retired = events(ws, "retire") + events(ws, "cancel")
        assert retired and all("error target met: released now" in e.reason
                               for e in events(ws, "retire")), retired
        done = forecast(ws)
        assert done is not None and done["status"] == "met" and done["samples_to_target"] == 0


def test_a_budget_too_small_is_said_once_with_the_dollars_that_would_meet_it(
        tmp_path: Path) -> None:
    with goal_run(tmp_path, 1, relative_error=0.0042, budget_usd=0.05,
                  max_iterations=200) as (ws, run):
        def said() -> list[str]:
            logs = cli(ws, "runs", "logs", "goal")
            return [x for x in logs.stdout.splitlines() if "cannot be met" in x]

        (line,) = wait_until(said, 180, "the run's log saying the budget is too small")
        assert "within budget_usd 0.05" in line and "samples to go" in line
        assert "$" in line.split("it would take", 1)[1] and "more" in line
        later = forecast(ws)
        assert later is not None and later["unmet"] in line
        page = dashboard_run(ws)  # the run page's few lines
        assert page[0].startswith("forecast ") and "samples to target" in page[0]
        assert any("halving the error: $" in x for x in page) and later["unmet"] in page[-1]
        wait_until(lambda: (f := forecast(ws)) and f["iteration"] >= later["iteration"] + 2,
                   120, "two more iterations")  # many keeper ticks later
        assert said() == [line]  # once
        stopped = cli(ws, "runs", "stop", "goal")
        assert stopped.returncode == 0, stopped.stderr
        run.communicate(timeout=120)


@pytest.mark.parametrize(("stop", "words"), [
    ({"relative_error": 0.01, "deadline": "2020-01-01T00:00"}, "stop.deadline: deadline "
                                                               "'2020-01-01T00:00' is in the past"),
    ({"relative_error": 0.01, "budget_usd": 0}, "stop.budget_usd: must be greater than 0"),
    ({"relative_error": 0.01, "deadline": "18h61"}, "stop.deadline: is not a duration"),
    ({"max_iterations": 3, "budget_core_hours": 1}, "stop.budget_core_hours: budget_core_hours "
                                                    "is a goal for reaching an error target")])
def test_a_bad_goal_is_one_line_exit_2_and_nothing_started(
        tmp_path: Path, stop: dict[str, Any], words: str) -> None:
    from mainboard.services.broker import EmbeddedBroker

    ws = goal_workspace(tmp_path, 1, **stop)
    done = cli(ws, "integrate", "run.toml", "--json")
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "run.toml" in done.stderr and done.stdout == ""
    assert not EmbeddedBroker(ws / ".mainboard").status().running
    assert not list((ws / ".mainboard").glob("runs/*/receipts.ndjson"))
