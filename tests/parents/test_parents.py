"""Runs that drive runs, on real Redis and real Celery workers: a scan of 6 points, a
tuning study of 12 trials (2 at a time, one kind of trial failing), a 3-child campaign,
a parent coordinator killed mid-study and resumed, the scan's plot on the dashboard in
real headless Chromium, and bad parent files (exit 2).

Every child is an ordinary run: its numbers are checked bit for bit against the same
child run integrated locally (``integrate_local``), so a parent adds bookkeeping, never
arithmetic. Budgets are a few thousand samples per child.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from mainboard.config import Config
from mainboard.errors import ConfigError
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.spec_parents import apply_point, parse_parent
from mainboard.receipts import ChildDone, ChildStarted, Receipts, RunCreated, RunResumed
from mainboard.runs.store import RECEIPTS_NAME, RunStore
from mainboard.tasks.runner import integrate as integrate_parent
from mainboard.tasks.workers import LocalWorkers
from tests.support.cliserver import popen_mainboard
from tests.support.integration import module_fixtures, subprocess_env
from tests.support.workspace import run_cli

pytestmark = [pytest.mark.live, pytest.mark.timeout(180)]
workspace_fixture, fleet_fixture = module_fixtures(2)

CHILD: dict[str, Any] = {
    "name": "g2", "seed": 3, "domain": {"continuous": 2},
    "integrand": {"kind": "genz.gaussian", "a": [4.0, 4.0], "u": [0.45, 0.45]},
    "sampler": {"kind": "vegas", "bins": 16}, "stop": {"max_samples": 8000},
    "batching": {"batch_size": 2000, "batches_per_iteration": 2, "fuse": True}}
CHILD_TOML = """name = "g2"
seed = 3
[domain]
continuous = 2
[integrand]
kind = "genz.gaussian"
a = [4.0, 4.0]
u = [0.45, 0.45]
[sampler]
kind = "vegas"
bins = 16
[stop]
max_samples = 8000
[batching]
batch_size = 2000
batches_per_iteration = 2
fuse = true
"""
SCAN_TOML = """name = "scan6"
child = "child.toml"
[scan]
max_concurrent_runs = 2
[[scan.parameters]]
name = "integrand.a"
values = [[2.0, 2.0], [4.0, 4.0], [6.0, 6.0]]
[[scan.parameters]]
name = "sampler.alpha"
values = [0.0, 0.5]
"""

TIMELINE = """
[[tasks]]
name = "train"
kind = "sample"
nr_samples = 8000

[[tasks]]
name = "infer"
kind = "sample"
frozen = true
nr_samples = 4000
"""


def cli(workspace: Config, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert workspace.path is not None
    return run_cli(workspace.path, *args, env=subprocess_env(), timeout=timeout)


def show(workspace: Config, *args: str) -> str:
    """``runs show ARGS`` through the CLI in this process (it only reads receipts)."""
    from click.testing import CliRunner

    from mainboard.cli import cli as main

    done = CliRunner().invoke(main, ["--config", str(workspace.path), "runs", "show", *args])
    assert done.exit_code == 0, done.output
    return done.stdout


def local(child: dict[str, Any], point: dict[str, Any], samples: int | None = None,
          name: str | None = None) -> Any:
    """The child run of ``point`` integrated in this process: the reference numbers."""
    return integrate_local(apply_point(child, point, samples=samples, name=name))


def lines(workspace: Config, run_id: str) -> list[tuple[float, Any]]:
    """(time, payload) of every receipt line of a run."""
    path = workspace.state_dir / "runs" / run_id / RECEIPTS_NAME
    stamps = [json.loads(raw)["ts"] for raw in path.read_text().splitlines() if raw.strip()]
    return list(zip(stamps, Receipts(path).read(), strict=True))


def most_at_once(workspace: Config, parent: str) -> int:
    """The most children of ``parent`` running at one time, from its receipts."""
    running = peak = 0
    for _, item in lines(workspace, parent):
        running += isinstance(item, ChildStarted) - isinstance(item, ChildDone)
        peak = max(peak, running)
    return peak


@pytest.fixture(scope="module")
def scan(workspace: Config, fleet: LocalWorkers) -> subprocess.CompletedProcess[str]:
    """``mainboard integrate scan.toml --json`` (child = "child.toml"), on the fleet."""
    folder = workspace.root / "scan"
    folder.mkdir()
    (folder / "child.toml").write_text(CHILD_TOML)
    (folder / "scan.toml").write_text(SCAN_TOML)
    done = cli(workspace, "integrate", str(folder / "scan.toml"), "--workers", "0", "--json")
    assert done.returncode == 0, done.stderr
    return done


def test_a_scan_of_6_points_is_6_child_runs_shown_as_a_table(
        workspace: Config, scan: subprocess.CompletedProcess[str]) -> None:
    done = scan
    got = json.loads(done.stdout)
    assert got["kind"] == "scan" and got["status"] == "finished"
    rows = got["rows"]
    assert [r["label"] for r in rows] == [f"p{i}" for i in range(6)]
    assert len({r["child"] for r in rows}) == 6 and all(r["status"] == "finished" for r in rows)
    assert [tuple(map(json.dumps, r["point"].values())) for r in rows] == [
        (json.dumps([a, a]), json.dumps(alpha)) for a in (2.0, 4.0, 6.0) for alpha in (0.0, 0.5)]
    for row in rows:  # each point is an ordinary run: the numbers of a local run of it
        ref = local(CHILD, row["point"], name=f"scan6.{row['label']}")
        assert (row["estimate"], row["error"], row["chi2_dof"], row["samples"]) == \
            (ref.estimate, ref.error, ref.chi2_dof, 8000)
    assert rows[0]["estimate"] > rows[2]["estimate"] > rows[4]["estimate"]  # narrower peaks
    assert most_at_once(workspace, got["run_id"]) == 2
    child = RunStore(workspace.state_dir).history(rows[3]["child"])
    assert child is not None and child.created.parent == got["run_id"]
    assert child.created.point == {"integrand.a": [4.0, 4.0], "sampler.alpha": 0.5}
    assert len(done.stderr.strip().splitlines()) >= 6  # one line per child as it ends

    shown = show(workspace, got["run_id"][:8])
    assert "integrand.a" in shown and "sampler.alpha" in shown
    assert sum(line.split()[0].startswith("p") for line in shown.splitlines()[3:]) == 6
    table = list(csv.DictReader(io.StringIO(show(workspace, "scan6", "--csv"))))
    assert [float(r["estimate"]) for r in table] == [r["estimate"] for r in rows]
    assert table[5]["integrand.a"] == "[6.0, 6.0]" and table[5]["sampler.alpha"] == "0.5"
    assert json.loads(show(workspace, "scan6", "--json"))["rows"] == rows
    assert f"child of   {got['run_id']}" in show(workspace, rows[3]["child"])
    from click.testing import CliRunner

    from mainboard.cli import cli as main

    listed = CliRunner().invoke(main, ["--config", str(workspace.path), "runs", "list"]).stdout
    parent_line = next(x for x in listed.splitlines() if x.startswith(got["run_id"][:16]))
    assert f"scan of child runs: `mainboard runs show {got['run_id']}`" in parent_line
    again = integrate_parent(parse_parent({**_scan_data(), "child": CHILD}), 0, config=workspace)
    assert again["rows"] == rows  # the same parent: its table, nothing run again
    assert all(len(lines(workspace, r["child"])) == 4 for r in rows)  # created, 2 its, done


def test_the_dashboard_plots_a_scan_estimate_against_its_parameter(
        workspace: Config, scan: subprocess.CompletedProcess[str]) -> None:
    from tests.support.chromium import Tab, drive
    from tests.support.dashboard import INK, MEASURE, start_dashboard, stop_dashboard

    got = json.loads(scan.stdout)
    dash = start_dashboard(workspace)
    try:
        data = dash.api(f"/api/run/{got['run_id']}")
        assert data["parent"]["kind"] == "scan" and data["parent"]["rows"] == got["rows"]

        async def look(tab: Tab) -> tuple[str, int, dict[str, Any]]:
            await tab.resize(1280, 900)  # a laptop screen: nothing sticks out sideways
            html = await tab.wait_for('id="plot-parent" data-points="6"', 15)
            fit = json.loads(await tab.evaluate(MEASURE))
            return html, await tab.evaluate(INK % "plot-parent"), fit

        html, ink, fit = drive(dash.page(f"/run/{got['run_id']}"), look)
    finally:
        stop_dashboard(dash)
    assert ink > 500, f"the scan plot drew nothing ({ink} dark pixels)"
    assert fit["scroll"] <= fit["client"] <= 1280 and not fit["out"], fit
    assert "sampler.alpha=0" in html and "sampler.alpha=0.5" in html  # one series per alpha
    assert html.count('data-child="p') == 6 and "integrand.a" in html
    for row in got["rows"]:
        assert f'href="/run/{row["child"]}"' in html


def _scan_data() -> dict[str, Any]:
    import tomllib

    data = tomllib.loads(SCAN_TOML)
    del data["child"]
    return data


def test_a_tuning_study_of_12_trials_2_at_a_time_survives_failing_trials(
        workspace: Config, fleet: LocalWorkers) -> None:
    child = copy.deepcopy(CHILD)
    child["integrand"] = {"kind": "python", "target": "tests.support.run_integrands:slow_gauss",
                          "params": {"delay": 0.0, "a": 4.0}}
    spec = parse_parent({"name": "tune12", "child": child, "tune": {
        "optimizer": {"algorithm": "tpe", "seed": 7, "max_trials": 12},
        "objective": {"metric": "time_normalized_variance", "mode": "minimize"},
        "max_concurrent_trials": 2, "samples_per_trial": 6000,
        "parameters": [
            {"kind": "float", "name": "sampler.alpha", "min": 0.05, "max": 2.0, "log": True},
            {"kind": "integer", "name": "sampler.bins", "min": 4, "max": 32, "step": 4},
            {"kind": "categorical", "name": "integrand.target",
             "values": ["tests.support.run_integrands:slow_gauss", "tests.support.run_integrands:explode"]}]}})
    got = integrate_parent(spec, 0, config=workspace)
    rows = got["rows"]
    assert len(rows) == 12 and got["status"] == "finished"
    failed = [r for r in rows if r["status"] == "failed"]
    ok = [r for r in rows if r["status"] == "finished"]
    assert failed and ok, "TPE tried both targets"
    assert all(r["point"]["integrand.target"].endswith("explode") for r in failed)
    assert all("explode" in (r["failure"] or "") or "boom" in (r["failure"] or "")
               for r in failed), [r["failure"] for r in failed]
    for row in ok:
        assert row["samples"] == 6000
        assert row["objective"] == pytest.approx(row["error"] ** 2 * row["wall_s"], rel=1e-12)
    best = min(ok, key=lambda r: r["objective"])
    assert got["best"]["label"] == best["label"]
    ref = local(child, best["point"], samples=6000, name=f"tune12.{best['label']}")
    assert (best["estimate"], best["error"]) == (ref.estimate, ref.error)
    assert most_at_once(workspace, got["run_id"]) == 2


def test_a_3_child_campaign_sums_children_and_sends_samples_where_the_variance_is(
        workspace: Config, fleet: LocalWorkers) -> None:
    narrow = {**CHILD, "integrand": {"kind": "genz.gaussian", "a": [8.0, 8.0], "u": [0.5, 0.5]}}
    naive = {**CHILD, "sampler": {"kind": "naive"}}
    children = [{"name": "a", "coefficient": 1.0, "run": CHILD},
                {"name": "b", "coefficient": -0.5, "run": narrow},
                {"name": "c", "coefficient": 2.0, "run": naive}]
    # one child at a time: each step is decided from the same estimates whatever order
    # children finish in on a loaded machine (two at a time made the split timing-bound)
    spec = parse_parent({"name": "camp3", "campaign": {
        "children": children, "max_active_runs": 1, "min_samples_per_child": 4000,
        "step_samples": 4000, "stop": {"max_total_samples": 36_000}}})
    got = integrate_parent(spec, 0, config=workspace)
    rows = {r["label"]: r for r in got["rows"]}
    assert set(rows) == {"a", "b", "c"} and all(r["status"] == "finished" for r in rows.values())
    assert sum(r["samples"] for r in rows.values()) == 36_000
    # the naive child (coefficient 2) carries most of the variance: most samples go there
    assert rows["c"]["samples"] > max(rows["a"]["samples"], rows["b"]["samples"])
    for c in children:  # extended step by step from its snapshots = one run of its budget
        row = rows[c["name"]]
        ref = local(c["run"], {}, samples=row["samples"], name=f"camp3.{c['name']}")
        assert (row["estimate"], row["error"]) == (ref.estimate, ref.error)
    total = got["total"]
    assert total["estimate"] == pytest.approx(
        sum(c["coefficient"] * rows[c["name"]]["estimate"] for c in children), rel=1e-12)
    assert total["error"] == pytest.approx(math.sqrt(sum(
        (c["coefficient"] * rows[c["name"]]["error"]) ** 2 for c in children)), rel=1e-12)
    assert total["stop_reason"] == "max_total_samples"
    history = RunStore(workspace.state_dir).history(rows["c"]["child"])
    assert history is not None and history.created.from_iteration  # a continued execution


def test_a_killed_parent_resumes_without_rerunning_finished_children(
        workspace: Config, fleet: LocalWorkers) -> None:
    child = copy.deepcopy(CHILD)
    child["integrand"] = {"kind": "python", "target": "tests.support.run_integrands:slow_gauss",
                          "params": {"delay": 0.1, "a": 4.0}}
    child["name"] = "slow"
    spec = {"name": "study-kill", "child": child, "tune": {
        "optimizer": {"algorithm": "random", "seed": 5, "max_trials": 6},
        "objective": {"metric": "variance"}, "max_concurrent_trials": 2,
        "parameters": [{"kind": "float", "name": "sampler.alpha", "min": 0.1, "max": 1.5}]}}
    path = workspace.root / "study-kill.toml"
    path.write_text(_toml(spec))
    parent = parse_parent(spec).run_id()
    assert workspace.path is not None
    coordinator = popen_mainboard(
        ["--config", str(workspace.path), "integrate",
         str(path), "--workers", "0"], env=subprocess_env(), cwd=workspace.root,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    receipts = workspace.state_dir / "runs" / parent / RECEIPTS_NAME
    deadline = time.monotonic() + 90
    while sum(isinstance(x, ChildDone) for x in (Receipts(receipts).read()
                                                 if receipts.exists() else [])) < 2:
        assert time.monotonic() < deadline and coordinator.poll() is None, "no trial ended"
        time.sleep(0.02)
    coordinator.send_signal(signal.SIGKILL)
    assert coordinator.wait(10) == -signal.SIGKILL
    before = [x for x in Receipts(receipts).read() if isinstance(x, ChildDone)]
    assert len(before) >= 2  # how many more ended before the kill depends on the machine

    resumed = cli(workspace, "runs", "resume", "study-kill", "--workers", "0", "--json")
    assert resumed.returncode == 0, resumed.stderr
    got = json.loads(resumed.stdout)
    assert got["status"] == "finished" and len(got["rows"]) == 6
    assert all(r["status"] == "finished" for r in got["rows"])
    for done in before:  # ended before the kill: one execution, never resumed or rerun
        kinds = [type(x) for _, x in lines(workspace, done.child)]
        assert kinds.count(RunCreated) == 1 and RunResumed not in kinds
        assert {r["label"]: r["estimate"] for r in got["rows"]}[done.label] == \
            done.result["estimate"]
    items = [x for _, x in lines(workspace, parent)]
    assert sum(isinstance(x, RunResumed) for x in items) == 1
    for row in got["rows"]:  # interrupted ones continued: still the numbers of one run
        ref = local(child, row["point"], name=f"study-kill.{row['label']}")
        assert (row["estimate"], row["error"]) == (ref.estimate, ref.error)
    removed = cli(workspace, "runs", "remove", "study-kill", "--yes", "--json")
    assert removed.returncode == 0 and json.loads(removed.stdout)["child_runs"] == 6
    store = RunStore(workspace.state_dir)  # the parent and its trials went together
    assert all(store.history(r) is None for r in [parent, *(x["child"] for x in got["rows"])])


def test_a_child_paused_by_hand_pauses_its_parent_and_resume_continues_it(
        workspace: Config, fleet: LocalWorkers) -> None:
    """Pausing a child is the user's doing, not a failure: the other points run, the parent
    ends paused, and `runs resume PARENT` continues that child from its snapshot."""
    from mainboard.parents.children import child_id
    from mainboard.receipts import IterationDone

    child = copy.deepcopy(CHILD)
    child["integrand"] = {"kind": "python", "target": "tests.support.run_integrands:slow_gauss",
                          "params": {"delay": 0.1, "a": 4.0}}
    child["stop"] = {"max_samples": 60_000}  # 15 iterations: the pause lands in the first few
    spec = {"name": "scan-pause", "child": child, "scan": {
        "max_concurrent_runs": 1, "parameters": [{"name": "sampler.alpha",
                                                  "values": [0.5, 1.0]}]}}
    parent = parse_parent(spec).run_id()
    first = child_id(parent, "p0")
    background = popen_mainboard(
        ["--config", str(workspace.path), "integrate",
         "--workers", "0", "--json", str(_write_scan(workspace, spec))], env=subprocess_env(),
        cwd=workspace.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    receipts = workspace.state_dir / "runs" / first / RECEIPTS_NAME
    deadline = time.monotonic() + 60
    while not (receipts.exists() and any(isinstance(x, IterationDone)
                                         for x in Receipts(receipts).read())):
        assert time.monotonic() < deadline and background.poll() is None, "p0 never iterated"
        time.sleep(0.02)
    from mainboard.runs.control import connect, request

    store = RunStore(workspace.state_dir)  # in this process: a CLI start could miss the child
    history = store.history(first)
    assert history is not None
    assert request(connect(workspace), store, history, "pause").status == "paused"
    out, err = background.communicate(timeout=120)
    assert background.returncode == 0, err
    paused = json.loads(out)
    assert paused["status"] == "paused", paused
    assert [r["status"] for r in paused["rows"]] == ["paused", "finished"]
    assert "runs resume" in paused["rows"][0]["failure"]

    resumed = cli(workspace, "runs", "resume", parent, "--workers", "0", "--json")
    assert resumed.returncode == 0, resumed.stderr
    got = json.loads(resumed.stdout)
    assert got["status"] == "finished" and [r["status"] for r in got["rows"]] == ["finished"] * 2
    assert any(isinstance(x, RunResumed) for _, x in lines(workspace, first))  # continued
    ref = local(child, got["rows"][0]["point"], name="scan-pause.p0")
    assert (got["rows"][0]["estimate"], got["rows"][0]["error"]) == (ref.estimate, ref.error)


def test_a_scan_whose_child_has_tasks_runs_each_points_timeline(
        workspace: Config, fleet: LocalWorkers) -> None:
    """Each point is a run with the child's [[tasks]]: train, then sample frozen; each
    child's `runs tasks` shows both done, and its result is its last sample task's."""
    folder = workspace.root / "scan-timeline"
    folder.mkdir()
    (folder / "child.toml").write_text(CHILD_TOML.replace('name = "g2"', 'name = "tl"')
                                       + TIMELINE)
    (folder / "scan.toml").write_text(
        'name = "scan-tl"\nchild = "child.toml"\n[scan]\nmax_concurrent_runs = 2\n'
        '[[scan.parameters]]\nname = "integrand.a"\nvalues = [[2.0, 2.0], [6.0, 6.0]]\n')
    done = cli(workspace, "integrate", str(folder / "scan.toml"), "--workers", "0", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert [r["status"] for r in rows] == ["finished", "finished"]
    for row in rows:
        listed = cli(workspace, "runs", "tasks", row["child"], "--json")
        assert listed.returncode == 0, listed.stderr
        tasks = json.loads(listed.stdout)["tasks"]
        assert [(t["name"], t["state"], t["samples"]) for t in tasks] == [
            ("train", "done", 8000), ("infer", "done", 4000)]
        assert (row["estimate"], row["error"]) == (tasks[1]["estimate"], tasks[1]["error"])
    assert rows[0]["estimate"] > rows[1]["estimate"]  # the narrower peak integrates smaller


def _write_scan(workspace: Config, spec: dict[str, Any]) -> Path:
    """A scan parent's file with its child as a [child] table."""
    from tests.support.fleet_helpers import toml_value

    child, scan = spec["child"], spec["scan"]
    out = [f'name = "{spec["name"]}"', "[child]"]
    out += [f"{k} = {toml_value(v)}" for k, v in child.items() if not isinstance(v, dict)]
    out += [f"[child.{k}]\n" + "\n".join(
        f"{kk} = {toml_value(vv) if isinstance(vv, dict) else json.dumps(vv)}"
        for kk, vv in v.items()) for k, v in child.items() if isinstance(v, dict)]
    out += ["[scan]", f"max_concurrent_runs = {scan['max_concurrent_runs']}"]
    for p in scan["parameters"]:
        out += ["[[scan.parameters]]", f'name = "{p["name"]}"',
                f"values = {json.dumps(p['values'])}"]
    path = workspace.root / f"{spec['name']}.toml"
    path.write_text("\n".join(out) + "\n")
    return path


def _toml(spec: dict[str, Any]) -> str:
    """The study's TOML (child as a [child] table)."""
    from tests.support.fleet_helpers import toml_value

    child, tune = spec["child"], spec["tune"]
    out = [f'name = "{spec["name"]}"', "[child]"]
    out += [f"{k} = {toml_value(v)}" for k, v in child.items() if not isinstance(v, dict)]
    for key, tab in child.items():
        if isinstance(tab, dict):
            out.append(f"[child.{key}]")
            out += [f"{k} = {json.dumps(v) if not isinstance(v, dict) else toml_value(v)}"
                    for k, v in tab.items()]
    out.append("[tune]")
    out += [f"{k} = {toml_value(v) if isinstance(v, dict) else json.dumps(v)}"
            for k, v in tune.items() if k != "parameters"]
    for p in tune["parameters"]:
        out.append("[[tune.parameters]]")
        out += [f"{k} = {json.dumps(v)}" for k, v in p.items()]
    return "\n".join(out) + "\n"


BAD = {
    "algorithm": ('name = "t"\nchild = "child.toml"\n[tune]\noptimizer = { algorithm = '
                  '"bayes", max_trials = 3 }\nobjective = { metric = "variance" }\n'
                  '[[tune.parameters]]\nkind = "float"\nname = "sampler.alpha"\nmin = 0.1\n'
                  'max = 1.0\n', "tune.optimizer.algorithm", "random"),
    "point": (SCAN_TOML.replace("[0.0, 0.5]", "[0.0, 50.0]"), "sampler.alpha", "50"),
    "bound": ('name = "t"\nchild = "child.toml"\n[tune]\noptimizer = { algorithm = '
              '"random", max_trials = 3 }\nobjective = { metric = "variance" }\n'
              '[[tune.parameters]]\nkind = "integer"\nname = "sampler.bins"\nmin = 0\n'
              'max = 8\n', "sampler.bins", "0"),
    "child file": (SCAN_TOML.replace("child.toml", "missing.toml"), "missing.toml", "not found"),
    "metric": ('name = "t"\nchild = "child.toml"\n[tune]\noptimizer = { algorithm = '
               '"grid", max_trials = 3 }\nobjective = { metric = "speed" }\n'
               '[[tune.parameters]]\nkind = "categorical"\nname = "sampler.bins"\n'
               'values = [4, 8]\n', "tune.objective.metric", "time_normalized_variance"),
    "tune timeline": ('name = "t"\nchild = "timeline.toml"\n[tune]\noptimizer = { algorithm '
                      '= "random", max_trials = 3 }\nobjective = { metric = "variance" }\n'
                      '[[tune.parameters]]\nkind = "float"\nname = "sampler.alpha"\nmin = 0.1\n'
                      'max = 1.0\n', "child", "cannot carry [[tasks]]"),
    "campaign timeline": ('name = "c"\n[campaign]\nmin_samples_per_child = 100\nstop = { '
                          'max_total_samples = 1000 }\n[[campaign.children]]\nname = "a"\n'
                          'coefficient = 1.0\nrun = "timeline.toml"\n',
                          "campaign.children[0].run", "cannot carry [[tasks]]"),
    "campaign stop": ('name = "c"\n[campaign]\nmin_samples_per_child = 100\nstop = {}\n'
                      '[[campaign.children]]\nname = "a"\ncoefficient = 1.0\n'
                      'run = "child.toml"\n', "campaign.stop", "max_total_samples"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_parent_files_name_the_key_and_what_is_valid(case: str, tmp_path: Path) -> None:
    text, key, valid = BAD[case]
    (tmp_path / "child.toml").write_text(CHILD_TOML)
    (tmp_path / "timeline.toml").write_text(CHILD_TOML + TIMELINE)
    (tmp_path / "p.toml").write_text(text)
    from mainboard.integrators.spec_parents import load_parent

    with pytest.raises(ConfigError) as caught:
        load_parent(tmp_path / "p.toml")
    message = str(caught.value)
    assert "\n" not in message and "p.toml" in message or "missing.toml" in message
    assert key in message and valid in message, message


def test_a_bad_parent_file_exits_2_with_one_line_and_starts_nothing(workspace: Config) -> None:
    path = workspace.root / "bad-scan.toml"
    (workspace.root / "child.toml").write_text(CHILD_TOML)
    path.write_text(SCAN_TOML.replace("[0.0, 0.5]", "[0.0, 50.0]"))
    done = cli(workspace, "integrate", str(path), "--workers", "0")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "sampler.alpha" in done.stderr and "50" in done.stderr
    assert not any((workspace.state_dir / "runs").glob("*/receipts.ndjson")) or all(
        "bad-scan" not in p.read_text()
        for p in (workspace.state_dir / "runs").glob("*/receipts.ndjson"))


@pytest.mark.parametrize("name", ["alpha-scan", "tune-vegas", "campaign"])
def test_the_example_parent_files_are_valid(name: str) -> None:
    from mainboard.integrators.spec_parents import load_parent
    from tests.support.integration import REPO

    spec = load_parent(REPO / "examples" / f"{name}.toml")
    assert spec.name == name
    if spec.campaign is not None:  # child files read and inlined: the id covers them
        assert all(isinstance(c.run, dict) for c in spec.campaign.children)
    else:
        assert isinstance(spec.child, dict) and spec.child["name"] == "gauss-8d"
    if spec.scan is not None:
        assert len(spec.scan.points()) == 6
