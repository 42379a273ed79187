"""`mainboard integrate` and `mainboard runs` as a user runs them: real processes, real Redis.

A coordinator killed with SIGKILL mid-run is resumed from its last receipt and ends with
the uninterrupted numbers; a clone branches from any snapshot under a new id; bad run
files exit 2 with one line naming the key and what is valid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import mainboard
from mainboard import keys
from mainboard.config import Config
from mainboard.errors import UserError
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.plain import to_plain
from mainboard.receipts import IterationDone, Receipts
from mainboard.runs.store import RECEIPTS_NAME
from mainboard.tasks.codec import loads
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import (
    GAUSS_4D,
    module_fixtures,
    slow_spec,
    spec,
    subprocess_env,
    toml,
    write_run,
)
from tests.support.killed_runs import kill_after, resume_matches
from tests.support.outage import run_id_of as spec_id
from tests.support.run_tasks import cli
from tests.support.services import RedisServer, require
from tests.support.workspace import run_cli

REQUIRED_KEYS = {"run_id", "estimate", "error", "chi2_dof", "q", "samples", "iterations",
                 "nan_count", "wall_s", "exact"}


workspace_fixture, fleet_fixture = module_fixtures(2)


@pytest.mark.live
def test_integrate_json_prints_one_object_with_the_result(workspace: Config,
                                                          fleet: LocalWorkers,
                                                          redis_server: RedisServer) -> None:
    run = spec(GAUSS_4D, name="cli-json")
    done = cli(workspace, "integrate", str(write_run(workspace, "cli-json", run)),
               "--workers", "0", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert REQUIRED_KEYS <= set(got)
    local = integrate_local(run)
    assert (got["run_id"], got["estimate"], got["error"], got["samples"], got["iterations"],
            got["nan_count"]) == (local.run_id, local.estimate, local.error, 120_000, 3, 0)
    assert got["exact"] == local.exact and got["chi2_dof"] == local.chi2_dof
    progress = [x for x in done.stderr.splitlines() if x.startswith("cli-json: iteration ")]
    assert [x.split(":")[1] for x in progress] == [" iteration 1", " iteration 2", " iteration 3"]
    assert re.fullmatch(r"cli-json: iteration 3: 120,000 samples  [0-9.e-]+ ± [0-9.e-]+  "
                        r"[0-9,]+ samples/s", progress[-1]), progress[-1]  # not on stdout

    # every iteration's snapshot is in Redis and in a receipt line, the same plain data
    r = redis.Redis.from_url(redis_server.url)
    lines = [p for p in Receipts(workspace.state_dir / "runs" / local.run_id / RECEIPTS_NAME)
             .read() if isinstance(p, IterationDone)]
    assert [p.iteration for p in lines] == [1, 2, 3]
    for line in lines:
        stored = to_plain(loads(r.get(keys.run_snapshot(local.run_id, line.iteration))))
        assert stored == line.snapshot and set(stored) >= {"sampler", "accumulator"}

    human = cli(workspace, "integrate", str(write_run(workspace, "cli-json", run)),
                "--workers", "0")
    assert human.returncode == 0, human.stderr
    assert f"run       {local.run_id} (cli-json)" in human.stdout
    assert "exact     " in human.stdout and "chi2/dof" in human.stdout


@pytest.mark.live
def test_the_issue_example_runs_as_written_on_the_embedded_broker(tmp_path: Path) -> None:
    """`mainboard integrate examples/gauss-8d.toml --workers 2 --json` in a workspace that
    names no broker: it starts the embedded Redis and two local workers, runs the full
    10^7-sample budget of the run file exactly as the issue writes it, and reports."""
    require("redis-server")
    from mainboard.config import load_config
    from mainboard.services.broker import EmbeddedBroker

    example = Path(__file__).resolve().parents[2] / "examples" / "gauss-8d.toml"
    config = tmp_path / "mainboard.toml"
    config.write_text('[workspace]\nname = "example"\n')
    state = load_config(config).state_dir
    try:
        done = run_cli(config, "integrate", str(example), "--workers", "2", "--json",
                       env=subprocess_env(), timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        got = json.loads(done.stdout)
        assert REQUIRED_KEYS <= set(got)
        assert got["run_id"] == spec_id_of_file(example) and got["name"] == "gauss-8d"
        assert got["samples"] == 10_000_000 and got["iterations"] == 10
        assert got["nan_count"] == 0 and got["exact"] == pytest.approx(0.000248556584, rel=1e-9)
        assert abs(got["estimate"] - got["exact"]) < 4 * got["error"]
        assert "gauss-8d: iteration 10: 10,000,000 samples" in done.stderr
        assert EmbeddedBroker(state).status().running  # started for this run, left up
        assert len(list((state / "workers").glob("*.log"))) == 2  # two local workers
        receipts = Receipts(state / "runs" / got["run_id"] / "receipts.ndjson").read()
        assert [p.iteration for p in receipts if isinstance(p, IterationDone)] == \
            list(range(1, 11))
    finally:
        EmbeddedBroker(state).down()


def spec_id_of_file(path: Path) -> str:
    from mainboard.integrators.spec import load_run_file

    return load_run_file(path).run_id()


@pytest.mark.live
def test_killed_coordinator_is_resumed_to_the_uninterrupted_result(workspace: Config) -> None:
    run = slow_spec(0.25, name="resume-me", stop={"max_samples": 200_000})
    killed = kill_after(workspace, "resume-me", run, iteration=1)
    run_id, receipts = killed.run_id, killed.receipts

    listed = {r["run_id"]: r for r in json.loads(cli(workspace, "runs", "list", "--json").stdout)}
    stored = [p.iteration for p in receipts.read() if isinstance(p, IterationDone)]
    assert listed[run_id]["status"] == "unfinished" and stored[0] == 1
    assert stored == list(range(1, listed[run_id]["iterations"] + 1))  # as many as are stored

    resume_matches(workspace, "resume-me", killed, samples=200_000, iterations=5)

    shown = json.loads(cli(workspace, "runs", "show", run_id[:6], "--json").stdout)
    assert shown["status"] == "finished" and shown["resumed_from"]
    assert [h["iteration"] for h in shown["history"]] == [1, 2, 3, 4, 5]


@pytest.mark.live
def test_clone_branches_from_a_snapshot_with_a_new_id(workspace: Config,
                                                      fleet: LocalWorkers) -> None:
    run = spec(GAUSS_4D, name="parent", stop={"max_samples": 160_000})
    parent = cli(workspace, "integrate", str(write_run(workspace, "parent", run)),
                 "--workers", "0", "--json")
    assert parent.returncode == 0, parent.stderr
    original = json.loads(parent.stdout)

    same = cli(workspace, "runs", "clone", original["run_id"], "--from-iteration", "2",
               "--workers", "0", "--json")
    assert same.returncode == 0, same.stderr
    branch = json.loads(same.stdout)
    assert branch["run_id"] != original["run_id"]
    assert (branch["estimate"], branch["error"], branch["samples"]) == \
        (original["estimate"], original["error"], 160_000)  # same seeds from iteration 3 on

    longer = cli(workspace, "runs", "clone", original["run_id"], "--from-iteration", "4",
                 "--max-samples", "240000", "--workers", "0", "--json")
    assert longer.returncode == 0, longer.stderr
    extended = json.loads(longer.stdout)
    assert extended["samples"] == 240_000 and extended["iterations"] == 6
    assert extended["run_id"] not in (original["run_id"], branch["run_id"])
    shown = cli(workspace, "runs", "show", extended["run_id"])
    assert f"clone of   {original['run_id']} after iteration 4" in shown.stdout

    missing = cli(workspace, "runs", "clone", original["run_id"], "--from-iteration", "9")
    assert missing.returncode == 2
    assert "no snapshot after iteration 9; valid: 0 (from the start), 1, 2, 3, 4" in \
        missing.stderr
    listed = cli(workspace, "runs", "list")
    assert original["run_id"] in listed.stdout and "finished" in listed.stdout


BAD_RUNS: dict[str, tuple[Callable[[dict[str, Any]], None], str, str]] = {
    "unknown key": (lambda d: d["stop"].update(max_sample=5), "stop.max_sample",
                    "valid: absolute_error, budget_core_hours, budget_usd, deadline, max_iterations, "
                    "max_samples"),
    "wrong type": (lambda d: d.update(seed="seven"), "seed", "(got 'seven')"),
    "no stop condition": (lambda d: d.update(stop={"min_samples": 5}), "stop",
                          "needs at least one stop condition; valid: max_samples, "
                          "max_iterations, absolute_error, relative_error"),
    "unknown integrand kind": (lambda d: d["integrand"].update(kind="genz.gauss"),
                               "integrand.kind", "valid: genz.oscillatory"),
    "parameter count": (lambda d: d["integrand"].update(a=[1.0]), "integrand.a",
                        "needs 4 entries"),
    "out of range": (lambda d: d["sampler"].update(bins=1), "sampler.bins",
                     "greater than or equal to 2"),
}


@pytest.mark.parametrize("case", [*sorted(BAD_RUNS), "toml syntax"])
def test_bad_run_files_exit_2_with_one_clear_line(case: str, workspace: Config) -> None:
    path = workspace.root / f"bad-{case.replace(' ', '-')}.toml"
    if case == "toml syntax":
        path.write_text("[stop\n")
        key, hint = "", "invalid TOML"
    else:
        data = spec(GAUSS_4D, name="bad")
        mutate, key, hint = BAD_RUNS[case]
        mutate(data)
        path.write_text(toml(data))
    done = cli(workspace, "integrate", str(path), "--workers", "0")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mainboard: error: {path}:"), lines
    assert f": {key}: " in lines[0] if key else True, lines[0]
    assert hint in lines[0], lines[0]


def test_missing_run_file_and_unknown_run(workspace: Config) -> None:
    done = cli(workspace, "integrate", str(workspace.root / "nope.toml"))
    assert done.returncode == 2 and "run file not found" in done.stderr
    unknown = cli(workspace, "runs", "show", "no-such-run")
    assert unknown.returncode == 2 and "no run matches 'no-such-run'" in unknown.stderr


def test_a_run_held_by_a_live_coordinator_is_refused(workspace: Config,
                                                     redis_server: RedisServer) -> None:
    run = spec(GAUSS_4D, name="held")
    r = redis.Redis.from_url(redis_server.url)
    lease = keys.run_lease(spec_id(run))
    r.set(lease, "elsewhere:4242:token", ex=30)
    try:
        with pytest.raises(UserError, match="run .* is being coordinated by pid 4242 on "
                           "elsewhere; wait for it"):
            mainboard.integrate(run, workers=0, config=workspace)
    finally:
        r.delete(lease)
