"""A parent's bookkeeping without a fleet: its table as `runs show` prints it from
receipts alone, the optimizers' trial parameters, the campaign's allocation rule, and
parents whose children never reach a worker (found finished in their own receipts, or
refused when they start), on the session's real Redis and run store.

tests/parents/test_parents.py runs whole parents on real workers; this file is the cheap
rest: no Celery worker is started, no sample is drawn.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mainboard.cli import cli
from mainboard.config import Config
from mainboard.errors import IntegrationFailed, MissingDependency
from mainboard.integrators.spec_parents import ParentSpec, parse_parent
from mainboard.parents import driver
from mainboard.parents.campaign import Allocation
from mainboard.parents.children import Outcome, child_id
from mainboard.parents.context import Context
from mainboard.parents.table import objective, scalar
from mainboard.parents.tune import Optimizer, optimizer
from mainboard.receipts import ChildDone, ChildStarted, RunCreated, RunFailed, RunFinished
from mainboard.redisclient import redis_client
from mainboard.runs.store import RunStore
from mainboard.tasks.app import make_app
from mainboard.tasks.lease import Lease
from mainboard.tasks.runner import Session
from tests.support.integration import write_workspace
from tests.support.services import RedisServer

CHILD: dict[str, Any] = {
    "name": "g2", "seed": 3, "domain": {"continuous": 2},
    "integrand": {"kind": "genz.gaussian", "a": [4.0, 4.0], "u": [0.45, 0.45]},
    "sampler": {"kind": "vegas", "bins": 16}, "stop": {"max_samples": 8000},
    "batching": {"batch_size": 2000, "batches_per_iteration": 2, "fuse": True}}
TUNE: dict[str, Any] = {
    "optimizer": {"algorithm": "random", "seed": 7, "max_trials": 3},
    "objective": {"metric": "variance"},
    "parameters": [{"kind": "float", "name": "sampler.alpha", "min": 0.1, "max": 1.0}]}
ROW = {"estimate": 0.25, "error": 0.01, "chi2_dof": 1.1, "samples": 8000, "iterations": 2,
       "wall_s": 1.5, "stop_reason": "max_samples"}


@pytest.fixture
def workspace(tmp_path: Path, redis_server: RedisServer) -> Config:
    """A workspace on the session's Redis; nothing is started in it."""
    return write_workspace(tmp_path / "ws", redis_server)


@pytest.fixture(scope="module")
def app(redis_server: RedisServer) -> Any:
    """One Celery app object for the module (never sends: no child reaches a worker)."""
    made = make_app(broker_url=redis_server.url)
    yield made
    made.close()


@pytest.fixture
def session(workspace: Config, redis_server: RedisServer, app: Any) -> Iterator[Session]:
    """What `tasks.runner.session` hands a parent, without its workers."""
    with redis_client(redis_server.url) as r:
        yield Session(app, r, RunStore(workspace.state_dir), None, Lease(r, "parent"),
                      f"127.0.0.1:{redis_server.port}", 60.0)


def show(workspace: Config, *args: str) -> str:
    """``mainboard runs show ARGS``: what the user reads (exit 0)."""
    done = CliRunner().invoke(cli, ["--config", str(workspace.path), "runs", "show", *args])
    assert done.exit_code == 0, done.output
    return done.stdout


def record(store: RunStore, spec: ParentSpec, *items: Any) -> str:
    """A parent's receipts: its run.created, then ``items``; its id."""
    parent = spec.run_id()
    store.record(RunCreated(run_id=parent, name=spec.name, kind=spec.kind,
                            spec=spec.model_dump(mode="json")))
    for item in items:
        store.record(item.model_copy(update={"run_id": parent}))
    return parent


def started(label: str, point: dict[str, Any], budget: int | None = None) -> ChildStarted:
    return ChildStarted(run_id="", child=f"c-{label}", label=label, point=point, budget=budget)


def done(label: str, point: dict[str, Any], status: str = "finished",
         result: dict[str, Any] | None = None, error: str | None = None,
         budget: int | None = None) -> ChildDone:
    return ChildDone(run_id="", child=f"c-{label}", label=label, point=point, status=status,
                     result=ROW if result is None and status == "finished" else result or {},
                     error=error, budget=budget)


# ----- the table, as `runs show` prints it ------------------------------------------------

def test_a_study_table_shows_each_trials_score_and_the_best(workspace: Config) -> None:
    spec = parse_parent({"name": "study", "child": CHILD, "tune": TUNE})
    store = RunStore(workspace.state_dir)
    vector = {**ROW, "estimate": [0.5, 0.2], "error": [0.02, 0.01]}
    parent = record(store, spec,
                    started("t0", {"sampler.alpha": 0.2}), started("t1", {"sampler.alpha": 0.5}),
                    started("t2", {"sampler.alpha": 0.9}),
                    done("t0", {"sampler.alpha": 0.2}, result=vector),
                    done("t1", {"sampler.alpha": 0.5}, "failed", error="boom: no such file"),
                    RunFinished(run_id="", result={"kind": "tune"}))
    text = show(workspace, parent)
    lines = text.splitlines()
    assert lines[0].split() == ["tune", parent, "(study)"]
    assert lines[2].split() == ["child", "sampler.alpha", "estimate", "error", "chi2/dof",
                                "samples", "wall", "s", "variance", "status"]
    assert lines[3].split()[-2:] == ["0.0004", "finished"]  # a vector's first component
    assert lines[4].endswith("failed (boom: no such file)") and lines[5].endswith("running")
    assert lines[-1] == "best       t0 variance 0.0004 at {'sampler.alpha': 0.2}"
    table = list(csv.DictReader(io.StringIO(show(workspace, parent, "--csv"))))
    assert [(r["child"], r["objective"], r["status"]) for r in table] == [
        ("t0", "0.0004", "finished"), ("t1", "", "failed"), ("t2", "", "running")]
    assert table[1]["failure"] == "boom: no such file" and table[0]["sampler.alpha"] == "0.2"


def test_a_study_with_no_finished_trial_says_so(workspace: Config) -> None:
    spec = parse_parent({"name": "none-yet", "child": CHILD, "tune": TUNE})
    parent = record(RunStore(workspace.state_dir), spec, started("t0", {"sampler.alpha": 0.2}))
    assert show(workspace, parent).splitlines()[-1] == "best       - (no trial finished)"
    assert json.loads(show(workspace, parent, "--json"))["best"] is None


def test_a_campaign_table_shows_coefficients_and_the_propagated_total(workspace: Config
                                                                      ) -> None:
    spec = parse_parent({"name": "camp", "campaign": {
        "children": [{"name": "a", "coefficient": 2.0, "run": CHILD},
                     {"name": "b", "coefficient": -1.0, "run": CHILD}],
        "min_samples_per_child": 4000, "stop": {"absolute_error": 0.5}}})
    store = RunStore(workspace.state_dir)
    parent = record(store, spec, started("a", {}, 4000), started("b", {}, 4000),
                    done("a", {}, budget=4000))
    assert show(workspace, parent).splitlines()[-1] == "total      0.5 ± 0.02  (8,000 samples)"
    store.record(RunFinished(run_id=parent, result={"kind": "campaign",
                                                    "stop_reason": "absolute_error"}))
    lines = show(workspace, parent).splitlines()
    assert lines[2].split()[:3] == ["child", "name", "coefficient"]
    assert lines[3].split()[:4] == ["a", "a", "2", "0.25"] and lines[4].split()[:3] == [
        "b", "b", "-1"]
    assert lines[-1] == "total      0.5 ± 0.02  (8,000 samples, stopped by absolute_error)"
    table = list(csv.DictReader(io.StringIO(show(workspace, parent, "--csv"))))
    assert [(r["child"], r["coefficient"], r["status"]) for r in table] == [
        ("a", "2.0", "finished"), ("b", "-1.0", "running")]
    data = json.loads(show(workspace, parent, "--json"))
    assert data["rows"][1]["variance"] is None and data["total"]["samples"] == 8000


def test_a_failed_scan_says_why_on_its_status_line(workspace: Config) -> None:
    spec = parse_parent({"name": "scan", "child": CHILD, "scan": {"parameters": [
        {"name": "sampler.alpha", "values": [0.5, 1.0]}]}})
    parent = record(RunStore(workspace.state_dir), spec,
                    RunFailed(run_id="", error="broker lost for 300 s"))
    lines = show(workspace, parent).splitlines()
    assert lines[1] == "status     failed: broker lost for 300 s"
    assert lines[2].split() == ["child", "sampler.alpha", "estimate", "error", "chi2/dof",
                                "samples", "wall", "s", "status"]


@pytest.mark.parametrize(("value", "number"), [
    (0.5, 0.5), (3, 3.0), ([2.0, 9.0], 2.0), ([], None), ({"real": 3.0, "imag": 4.0}, 5.0),
    ("nan-as-text", None)])
def test_a_result_value_is_one_number(value: Any, number: float | None) -> None:
    assert scalar(value) == number


def test_each_metric_scores_a_row_and_an_unscorable_row_scores_none() -> None:
    row = {"estimate": -0.5, "error": 0.1, "wall_s": 2.0}
    assert objective(row, "relative_error") == pytest.approx(0.2)
    assert objective(row, "time_normalized_variance") == pytest.approx(0.02)
    assert (objective(row, "error"), objective(row, "wall_s")) == (0.1, 2.0)
    assert objective({**row, "estimate": 0.0}, "relative_error") is None
    assert objective({"estimate": 1.0, "error": 0.1}, "wall_s") is None
    assert objective({"estimate": 1.0}, "variance") is None
    assert objective({"estimate": 1.0, "error": float("inf")}, "variance") is None


# ----- optimizers -------------------------------------------------------------------------

def _tune(algorithm: str, **extra: Any) -> Any:
    return parse_parent({"name": "t", "child": CHILD, "tune": {
        "optimizer": {"algorithm": algorithm, "seed": 1, "max_trials": 100, "grid_points": 2,
                      **extra},
        "objective": {"metric": "variance"},
        "parameters": [
            {"kind": "float", "name": "sampler.alpha", "min": 0.1, "max": 1.0},
            {"kind": "integer", "name": "sampler.bins", "min": 4, "max": 8, "step": 4},
            {"kind": "categorical", "name": "seed", "values": [1, 2, 3]}]}}).tune


def test_a_grid_walks_every_combination_once_the_last_parameter_fastest() -> None:
    grid = Optimizer(_tune("grid"))
    assert grid.trials == 2 * 2 * 3  # max_trials 100 capped at the grid's size
    points = [grid.params(n) for n in range(grid.trials)]
    assert points[0] == {"sampler.alpha": 0.1, "sampler.bins": 4, "seed": 1}
    assert points[1] == {"sampler.alpha": 0.1, "sampler.bins": 4, "seed": 2}
    assert points[-1] == {"sampler.alpha": 1.0, "sampler.bins": 8, "seed": 3}
    assert len({json.dumps(p, sort_keys=True) for p in points}) == 12


def test_random_trials_depend_on_their_number_alone() -> None:
    tune = _tune("random")
    first, again = Optimizer(tune), Optimizer(tune)
    drawn = [first.params(n) for n in range(20)]
    assert [again.params(n) for n in reversed(range(20))] == drawn[::-1]
    assert all(0.1 <= p["sampler.alpha"] <= 1.0 and p["sampler.bins"] in (4, 8)
               and p["seed"] in (1, 2, 3) for p in drawn)
    assert len({p["seed"] for p in drawn}) > 1
    first.tell(0, drawn[0], 0.5)  # random learns nothing: the same draws after
    assert first.params(3) == drawn[3]


def test_tpe_rebuilt_from_ended_trials_asks_within_bounds() -> None:
    pytest.importorskip("optuna")
    tpe = optimizer(_tune("tpe"))
    tpe.tell(0, {"sampler.alpha": 0.3, "sampler.bins": 8, "seed": 2}, 0.01)  # told again
    tpe.tell(1, {"sampler.alpha": 0.9, "sampler.bins": 4, "seed": 3}, None)  # a failed one
    asked = tpe.params(2)
    tpe.tell(2, asked, 0.02)
    assert len(tpe.study.trials) == 3 and 0.1 <= asked["sampler.alpha"] <= 1.0
    assert [t.state.name for t in tpe.study.trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert tpe.study.trials[0].params["seed"] == 1  # a category by its index


def test_tpe_without_optuna_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed
    with pytest.raises(MissingDependency) as caught:
        optimizer(_tune("tpe"))
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    assert "pip install 'mainboard[tune]'" in str(caught.value)


# ----- the campaign's books -----------------------------------------------------------------

def _campaign(stop: dict[str, Any], names: tuple[str, ...] = ("a", "b")) -> ParentSpec:
    return parse_parent({"name": "camp", "campaign": {
        "children": [{"name": n, "coefficient": 1.0 + i, "run": CHILD}
                     for i, n in enumerate(names)],
        "min_samples_per_child": 100, "step_samples": 50, "stop": stop}})


def test_the_next_samples_go_to_the_largest_variance_until_the_error_is_met(
        session: Session) -> None:
    spec = _campaign({"absolute_error": 0.02})
    assert spec.campaign is not None
    books = Allocation(Context(session, spec, spec.run_id(), [], None, "camp.toml"),
                       spec.campaign)
    books.rows = {"a": {**ROW, "label": "a", "error": 0.03},
                  "b": {**ROW, "label": "b", "error": 0.01}}
    books.given = {"a": 100, "b": 100}
    assert books.next() == ("a", 150)  # 1 x 0.03 > 2 x 0.01; no sample cap
    books.active = {"a", "b"}
    assert books.next() is None  # every child runs: none idle
    books.rows["a"]["error"] = books.rows["b"]["error"] = 0.001  # total: sqrt(5) x 0.001
    assert books.stop_reason() == "absolute_error" and books.next() is None
    with pytest.raises(IntegrationFailed, match=r"campaign .*: child b \(x\) failed: boom"):
        books.absorb(Outcome(books.child("b", 150), "x", "failed", error="boom"))


def test_a_campaign_whose_child_cannot_start_fails_in_one_line_recorded(
        session: Session, workspace: Config) -> None:
    bad = {**CHILD, "integrand": {"kind": "python",
                                  "target": "tests.support.run_integrands:no_such_integrand"}}
    spec = parse_parent({"name": "camp-bad", "campaign": {
        "children": [{"name": "a", "coefficient": 1.0, "run": bad}],
        "min_samples_per_child": 100, "stop": {"max_total_samples": 100}}})
    ended: list[Outcome] = []
    with pytest.raises(IntegrationFailed) as caught:
        driver.drive(session, spec, None, ended.append, "camp-bad.toml")
    message = str(caught.value)
    assert "\n" not in message and "child a" in message and "no_such_integrand" in message
    assert "integrand.target" in message and [o.status for o in ended] == ["failed"]
    history = RunStore(workspace.state_dir).history(spec.run_id())
    assert history is not None and history.status == "failed"
    assert history.failed is not None and "no_such_integrand" in history.failed.error


def test_a_resumed_campaign_whose_total_is_met_runs_nothing_more(session: Session,
                                                                 workspace: Config) -> None:
    spec = _campaign({"absolute_error": 0.5, "max_total_samples": 10_000}, names=("a",))
    store = RunStore(workspace.state_dir)
    parent = record(store, spec, started("a", {}, 100), done("a", {}, "stopped", budget=100),
                    started("a", {}, 150), done("a", {}, budget=150))
    history = store.history(parent)
    got = driver.drive(session, spec, history, None, "camp.toml")
    assert got["status"] == "finished" and got["total"]["stop_reason"] == "absolute_error"
    assert got["total"]["estimate"] == ROW["estimate"] and len(got["rows"]) == 1
    kinds = [type(x).__name__ for x in store.history(parent).children]  # type: ignore[union-attr]
    assert kinds == ["ChildStarted", "ChildDone"] * 2  # nothing started again


# ----- children found finished in their own receipts ----------------------------------------

def _finish_child(store: RunStore, parent: str, label: str, child: Any) -> str:
    """A child's own receipts say it finished (its parent was killed before noting it)."""
    run_id = child_id(parent, label)
    store.record(RunCreated(run_id=run_id, name=child.name,
                            spec=child.model_dump(mode="json"), parent=parent))
    store.record(RunFinished(run_id=run_id, result=ROW))
    return run_id


def test_a_scan_point_that_finished_before_is_taken_from_its_receipts(
        session: Session, workspace: Config) -> None:
    spec = parse_parent({"name": "scan1", "child": CHILD, "scan": {"parameters": [
        {"name": "sampler.alpha", "values": [0.5]}]}})
    store = RunStore(workspace.state_dir)
    point = {"sampler.alpha": 0.5}
    child = spec.child_spec(point, name="scan1.p0")
    run_id = _finish_child(store, spec.run_id(), "p0", child)
    ended: list[Outcome] = []
    got = driver.drive(session, spec, None, ended.append, "scan1.toml")
    assert got["status"] == "finished" and got["rows"][0]["estimate"] == ROW["estimate"]
    assert [(o.run_id, o.reused) for o in ended] == [(run_id, True)]
    assert len(store.history(run_id).iterations) == 0  # type: ignore[union-attr]


def test_a_study_trial_that_finished_before_is_learnt_from_its_receipts(
        session: Session, workspace: Config) -> None:
    data = {"name": "study1", "child": CHILD,
            "tune": {**TUNE, "optimizer": {**TUNE["optimizer"], "max_trials": 1}}}
    spec = parse_parent(data)
    assert spec.tune is not None
    params = Optimizer(spec.tune).params(0)
    child = spec.child_spec(params, samples=spec.trial_samples(), name="study1.t0")
    _finish_child(RunStore(workspace.state_dir), spec.run_id(), "t0", child)
    got = driver.drive(session, spec, None, None, "study1.toml")
    assert got["status"] == "finished" and got["best"]["label"] == "t0"
    assert got["best"]["objective"] == pytest.approx(ROW["error"] ** 2)
    again = driver.drive(session, spec, RunStore(workspace.state_dir).history(spec.run_id()),
                         None, "study1.toml")
    assert again == got  # finished: only shown


def test_resuming_a_finished_parent_prints_its_table(workspace: Config) -> None:
    spec = parse_parent({"name": "scan-done", "child": CHILD, "scan": {"parameters": [
        {"name": "sampler.alpha", "values": [0.5]}]}})
    parent = record(RunStore(workspace.state_dir), spec,
                    started("p0", {"sampler.alpha": 0.5}), done("p0", {"sampler.alpha": 0.5}),
                    RunFinished(run_id="", result={"kind": "scan"}))
    resumed = CliRunner().invoke(cli, ["--config", str(workspace.path), "runs", "resume",
                                       parent, "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["rows"][0]["estimate"] == ROW["estimate"]
