"""A run's ``[[tasks]]``: train, sample frozen, plot, branch ``from`` a task, append.

Real Redis, real Celery workers as processes: the module's fleet of 2 (``--workers 0``) where
the scenario is not the workers' own start, ``--workers N`` where it is (1 and 2 workers giving
the same numbers, a run in the background); real `mainboard` subprocesses for what a user
types; small budgets.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

import mainboard
from mainboard import keys
from mainboard.config import Config
from mainboard.errors import ConfigError
from mainboard.integrators.spec import load_run_file, parse_run
from mainboard.integrators.spec_taskfile import load_task_file
from mainboard.receipts import IterationDone, Receipts
from mainboard.runs.store import RECEIPTS_NAME
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import module_fixtures, write_workspace
from tests.support.run_tasks import (
    HEAD,
    cli,
    gauss,
    integrate_in_background,
    line_along_x,
    linspace,
    task_receipts,
    xy_plane,
)
from tests.support.run_tasks import task as new_task
from tests.support.services import RedisServer

TASKS = "\n".join([
    new_task("sample", "train", nr_samples=64000),
    new_task("sample", "infer", frozen=True, nr_samples=48000),
    new_task("plot_line", geometry=line_along_x([0.0, 0.5, 0.5], 11)),
    new_task("sample", "again", from_="train", nr_samples=32000)])

APPENDED = "\n".join([
    new_task("image", geometry=xy_plane(0.6, linspace(0.0, 1.0, 4), linspace(0.2, 0.8, 3))),
    new_task("sample", "more", frozen=True, nr_samples=16000)])


workspace_fixture, fleet_fixture = module_fixtures(2)


# ---------------------------------------------------------------- the run id
def test_a_run_without_tasks_keeps_its_id() -> None:
    """The run id hashes the definition; an absent (or empty) task list is not in it, so
    every existing run keeps its id (this one was computed before tasks existed)."""
    data: dict[str, Any] = {"name": "t", "seed": 1, "domain": {"continuous": 2},
                            "integrand": {"kind": "genz.gaussian", "a": [1.0, 1.0]},
                            "stop": {"max_samples": 1000}}
    assert parse_run(data).run_id() == "94a127f38fb8dbb4"
    assert parse_run({**data, "tasks": []}).run_id() == "94a127f38fb8dbb4"
    assert "tasks" not in parse_run(data).model_dump(mode="json")
    with_tasks = parse_run({**data, "task_queue": [{"kind": "sample", "nr_samples": 10}]})
    assert with_tasks.run_id() != "94a127f38fb8dbb4"
    assert with_tasks.model_dump(mode="json")["tasks"] == [{"kind": "sample", "nr_samples": 10}]


def test_the_timeline_names_tasks_and_branches_from(tmp_path: Path) -> None:
    """Generated names are ``<kind>-<n>``; omitted keys keep the previous task's value;
    ``from`` starts from the named task's tables."""
    path = tmp_path / "run.toml"
    path.write_text(HEAD + TASKS)
    steps = load_run_file(path).task_steps()
    assert [(s.name, s.kind, s.parent) for s in steps] == [
        ("train", "sample", None), ("infer", "sample", 0), ("plot_line-1", "plot_line", 1),
        ("again", "sample", 0)]
    assert [s.settings["frozen"] for s in steps] == [False, True, True, False]
    assert [s.settings["stop"] for s in steps] == [
        {"max_samples": 64000}, {"max_samples": 48000}, {"max_samples": 48000},
        {"max_samples": 32000}]


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(("tasks", "says"), [
    ('[[tasks]]\nkind = "teleport"\n',
     "tasks[0].kind: unknown kind 'teleport'; valid: sample, plot_line, image, configure, "
     "pause"),
    ('[[tasks]]\nkind = "sample"\nnr_samples = 10\n[[tasks]]\nkind = "sample"\n'
     'from = "later"\n[[tasks]]\nname = "later"\nkind = "sample"\n',
     "tasks[1].from: no earlier task is named 'later' (got 'later'); valid: sample-1"),
], ids=["unknown-kind", "from-no-earlier-task"])
def test_a_bad_task_list_is_refused_in_one_line(workspace: Config, tasks: str,
                                                says: str) -> None:
    """Exit 2, one line on stderr naming the file, the key and what is valid; no run."""
    path = workspace.root / "bad.toml"
    path.write_text(HEAD + tasks)
    done = cli(workspace, "integrate", str(path), "--workers", "1")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mainboard: error: {path}:"), done.stderr
    assert says in lines[0], lines[0]
    assert not (workspace.state_dir / "runs").exists() or \
        not any((workspace.state_dir / "runs").iterdir())


def test_append_to_a_run_that_does_not_exist_is_refused(workspace: Config) -> None:
    task = workspace.root / "task.toml"
    task.write_text(APPENDED)
    done = cli(workspace, "runs", "append", "nosuchrun", str(task))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no run matches 'nosuchrun'" in lines[0], done.stderr
    assert done.stdout == ""


def test_a_bad_appended_task_names_the_task_file(tmp_path: Path) -> None:
    """The task file of `runs append` is checked against the run it joins: a `from` must
    name one of the run's tasks, a kind must be known; one ConfigError line each."""
    run = tmp_path / "run.toml"
    run.write_text(HEAD + TASKS)
    spec = load_run_file(run)
    steps = spec.task_steps()
    task = tmp_path / "task.toml"
    task.write_text('[[tasks]]\nkind = "sample"\nfrom = "nope"\n')
    with pytest.raises(ConfigError) as caught:
        load_task_file(task, spec, steps)
    assert str(caught.value) == (f"{task}: tasks[0].from: no earlier task is named 'nope' "
                                 "(got 'nope'); valid: train, infer, plot_line-1, again")
    task.write_text('[[task_queue]]\nkind = "warp"\n')
    with pytest.raises(ConfigError, match=r"task\.toml:2: task_queue\.kind: unknown kind 'warp'"):
        load_task_file(task, spec, steps)
    task.write_text('task = { kind = "sample", from = "again", nr_samples = 8000 }\n')
    assert load_task_file(task, spec, steps) == [
        {"kind": "sample", "from": "again", "nr_samples": 8000}]


def slow_head(name: str, delay: float) -> str:
    """HEAD renamed, its Gaussian through a Python integrand that sleeps ``delay`` s a batch."""
    return HEAD.replace('"tasks-gauss"', f'"{name}"').replace(
        'kind = "genz.gaussian"\na = [3.0, 3.0, 3.0]\nu = [0.4, 0.5, 0.6]',
        'kind = "python"\ntarget = "tests.support.run_integrands:slow_gauss"\n'
        f'params = {{ delay = {delay}, a = 3.0 }}')


# ---------------------------------------------------------------- a run of tasks
@pytest.mark.live
def test_tasks_run_to_the_end_then_an_appended_task(workspace: Config,
                                                    fleet: LocalWorkers) -> None:
    """train -> sample frozen -> plot_line -> sample from train, on the fleet of 2; `runs
    tasks` shows 4 done tasks; `runs append` continues the finished run with a 5th."""
    path = workspace.root / "tasks.toml"
    path.write_text(HEAD + TASKS)
    run_id = load_run_file(path).run_id()
    done = cli(workspace, "integrate", str(path), "--workers", "0", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got["run_id"] == run_id and got["samples"] == 32000  # the last task's own

    listed = cli(workspace, "runs", "tasks", run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    table = json.loads(listed.stdout)
    assert table["status"] == "finished"
    rows = table["tasks"]
    assert [(r["name"], r["state"]) for r in rows] == [
        ("train", "done"), ("infer", "done"), ("plot_line-1", "done"), ("again", "done")]
    assert [r["samples"] for r in rows] == [64000, 48000, 0, 32000]
    infer = rows[1]
    assert infer["frozen"] is True
    assert abs(infer["estimate"] - got["exact"]) < 4 * infer["error"]
    assert rows[3]["from"] == "train"

    human = cli(workspace, "runs", "tasks", run_id)
    assert human.returncode == 0 and "infer" in human.stdout and "sample frozen" in human.stdout

    task = workspace.root / "more.toml"
    task.write_text(APPENDED)
    more = cli(workspace, "runs", "append", run_id, str(task), "--workers", "0", "--json")
    assert more.returncode == 0, more.stderr[-3000:]
    assert json.loads(more.stdout)["samples"] == 16000
    rows = json.loads(cli(workspace, "runs", "tasks", run_id, "--json").stdout)["tasks"]
    assert [(r["name"], r["state"], r["samples"]) for r in rows][-2:] == [
        ("image-1", "done", 0), ("more", "done", 16000)]

    exported = cli(workspace, "runs", "export", run_id, "--format", "csv")
    assert exported.returncode == 0, exported.stderr
    table = list(csv.DictReader(io.StringIO(exported.stdout)))
    line = [r for r in table if r["task"] == "plot_line-1"]
    image = [r for r in table if r["task"] == "image-1"]
    assert [float(r["t"]) for r in line] == pytest.approx([i / 10 for i in range(11)])
    assert [float(r["value"]) for r in line] == pytest.approx(
        [gauss([t, 0.5, 0.5]) for t in np.linspace(0.0, 1.0, 11)], rel=1e-12)
    assert len(image) == 12  # v outer, u inner
    assert [float(r["u"]) for r in image[:5]] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0, 0.0])
    assert [float(r["v"]) for r in image[:5]] == pytest.approx([0.2, 0.2, 0.2, 0.2, 0.5])
    assert [float(r["value"]) for r in image] == pytest.approx(
        [gauss([float(r["u"]), float(r["v"]), 0.6]) for r in image], rel=1e-12)


@pytest.mark.live
def test_per_task_results_are_bit_identical_on_one_and_two_workers(
        tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> None:
    """The same task run on 1 and on 2 local workers: every task's samples, estimate and
    error (and the plot's values) equal to the last bit."""
    runs = []
    for workers in (1, 2):
        config = write_workspace(tmp_path_factory.mktemp(f"w{workers}"), redis_server)
        path = config.root / "tasks.toml"
        path.write_text(HEAD + TASKS)
        result = mainboard.integrate(path, workers=workers, config=config)
        runs.append([(t.name, t.samples, t.estimate, t.error, t.values)
                     for t in task_receipts(config, result.run_id)])
    assert runs[0] == runs[1]
    assert [name for name, *_ in runs[0]] == ["train", "infer", "plot_line-1", "again"]


PAUSING = """
[[tasks]]
name = "train"
kind = "sample"
nr_samples = 32000

[[tasks]]
kind = "configure"
batching = { batch_size = 4000, batches_per_iteration = 2, fuse = true }

[[tasks]]
kind = "pause"

[[tasks]]
name = "after"
kind = "sample"
frozen = true
nr_samples = 16000
"""


@pytest.mark.live
def test_a_pause_task_pauses_and_resume_goes_on_with_the_configured_tables(
        workspace: Config, fleet: LocalWorkers) -> None:
    """The run stops at the pause task (status paused, the next task pending); a task
    appended meanwhile waits for the resume; `runs
    resume` runs the next task with the batching the configure task set."""
    path = workspace.root / "pausing.toml"
    path.write_text(HEAD.replace('"tasks-gauss"', '"tasks-pause"') + PAUSING)
    run_id = load_run_file(path).run_id()
    done = cli(workspace, "integrate", str(path), "--workers", "0", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["stop_reason"] == "paused"
    table = json.loads(cli(workspace, "runs", "tasks", run_id, "--json").stdout)
    assert table["status"] == "paused"
    assert [(r["name"], r["state"]) for r in table["tasks"]] == [
        ("train", "done"), ("configure-1", "done"), ("pause-1", "done"), ("after", "pending")]

    task = workspace.root / "later.toml"  # appended to the paused run: run on its resume
    task.write_text(new_task("sample", "later", nr_samples=8000))
    appended = cli(workspace, "runs", "append", run_id, str(task))
    assert appended.returncode == 0, appended.stderr
    assert f"`mainboard runs resume {run_id}` runs the new tasks" in appended.stdout

    resumed = cli(workspace, "runs", "resume", run_id, "--workers", "0", "--json")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(resumed.stdout)["samples"] == 8000  # the last task's own
    table = json.loads(cli(workspace, "runs", "tasks", run_id, "--json").stdout)
    assert table["status"] == "finished"
    assert [(r["name"], r["state"], r["samples"]) for r in table["tasks"]][3:] == [
        ("after", "done", 16000), ("later", "done", 8000)]
    lines = [p for p in Receipts(workspace.state_dir / "runs" / run_id / RECEIPTS_NAME).read()
             if isinstance(p, IterationDone)]
    # 32000 samples at 4 x 4000 per iteration, then 16000 and 8000 at the configured 2 x 4000
    assert [p.batches for p in lines] == [4, 4, 2, 2, 2]
    assert [p.iteration for p in lines] == [1, 2, 3, 4, 5]  # numbered across tasks


@pytest.mark.live
def test_a_task_paused_midway_resumes_to_the_uninterrupted_numbers(
        workspace: Config, fleet: LocalWorkers, redis_server: RedisServer,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """`runs pause` inside a sample task, then `runs resume`: the task goes on from its
    last snapshot and every task ends with the numbers of an uninterrupted run. The task's
    second iteration waits for a gate the test opens once the pause is asked (a faster run
    had ended the task before the `runs pause` command had started)."""
    gate = tmp_path_factory.mktemp("gate")
    text = HEAD.replace('"tasks-gauss"', '"tasks-midway"').replace(
        'kind = "genz.gaussian"\na = [3.0, 3.0, 3.0]\nu = [0.4, 0.5, 0.6]',
        'kind = "python"\ntarget = "tests.support.run_integrands:held_gauss"\n'
        f'params = {{ ledger = "{gate / "rows"}", gate = "{gate / "open"}", '
        'free_rows = 16000, a = 3.0 }') + (  # one iteration: 4 batches of 4000
        new_task("sample", "train", nr_samples=64000) + new_task("sample", frozen=True, nr_samples=32000))
    path = workspace.root / "midway.toml"
    path.write_text(text)
    run_id = load_run_file(path).run_id()
    runner = integrate_in_background(workspace, path)
    r = redis.Redis.from_url(redis_server.url)
    try:
        while not r.exists(keys.run_snapshot(run_id, 1)):  # the first iteration merged
            assert runner.poll() is None, runner.communicate()
            r.blpop(["mainboard-test:never"], timeout=0.1)  # a pause between looks
    finally:
        r.close()
    paused = cli(workspace, "runs", "pause", run_id)
    (gate / "open").touch()
    out, err = runner.communicate(timeout=120)
    assert paused.returncode == 0 and runner.returncode == 0, paused.stderr + err
    table = json.loads(cli(workspace, "runs", "tasks", run_id, "--json").stdout)
    assert table["status"] == "paused"
    assert [r["state"] for r in table["tasks"]] == ["running", "pending"]
    resumed = cli(workspace, "runs", "resume", run_id, "--workers", "0", "--json")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    other = write_workspace(tmp_path_factory.mktemp("midway"), redis_server)
    (other.root / "midway.toml").write_text(text)
    mainboard.integrate(other.root / "midway.toml", workers=0, config=other)
    expect = [(t.name, t.samples, t.estimate, t.error) for t in task_receipts(other, run_id)]
    assert [(t.name, t.samples, t.estimate, t.error)
            for t in task_receipts(workspace, run_id)] == expect
    assert [name for name, *_ in expect] == ["train", "sample-2"]  # the 2nd sample task
