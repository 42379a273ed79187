"""`mainboard dashboard` as a user runs it: a real run on real Redis and real workers, the
dashboard as a `mainboard` subprocess, pages looked at in real headless Chromium.

The run page's screenshot is kept as /tmp/mainboard-test-artifacts/dashboard-run.png (as
the fleet tier keeps Flower's); its path is printed and recorded as a test property.
"""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

import mainboard
from mainboard.board import Board
from mainboard.cli import cli
from mainboard.config import Config
from mainboard.errors import ReceiptError
from mainboard.integrators.driver import RunResult
from mainboard.receipts import IterationDone, Receipts, RunCreated, RunPaused
from mainboard.runs.lazy import LazyReceipts
from mainboard.runs.logs import LogLine, append_logs
from mainboard.runs.store import RECEIPTS_NAME, RunStore
from tests.support.chromium import Tab, drive
from tests.support.dashboard import INK, Dashboard, start_dashboard, stop_dashboard
from tests.support.integration import spec, write_workspace
from tests.support.run_receipts import copy_run, fill
from tests.support.services import RedisServer, start_redis

RUN_NAME = "dash-gauss"
ARTIFACTS = Path("/tmp/mainboard-test-artifacts")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Config:
    return write_workspace(tmp_path_factory.mktemp("dashboard"), redis_server)


@pytest.fixture(scope="module")
def finished(workspace: Config) -> RunResult:
    """A real run: coordinator here, one real Celery worker, real receipts."""
    return mainboard.integrate(spec(name=RUN_NAME, stop={"max_samples": 120_000}), workers=1,
                               config=workspace)


@pytest.fixture(scope="module")
def dash(workspace: Config, finished: RunResult) -> Iterator[Dashboard]:
    """The dashboard, started after the run (it reads the receipts the run left)."""
    dash = start_dashboard(workspace)
    yield dash
    stop_dashboard(dash)


def _status(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, Any]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),
                                    timeout=10) as reply:
            return reply.status, reply.read().decode(), reply.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers


def test_every_page_and_api_answers_401_without_the_token(dash: Dashboard,
                                                           finished: RunResult) -> None:
    paths = ["/", "/runs", f"/run/{finished.run_id}", f"/run/{RUN_NAME}", "/fleet", "/jobs",
             "/api/runs", "/api/runs-version", f"/api/run/{finished.run_id}",
             f"/api/run/{finished.run_id}/version", f"/api/run/{finished.run_id}/tasks",
             "/api/fleet", "/api/jobs",
             "/api/jobs-version", "/api/broker",
             "/jobs/20250101-120000-x-1a2b3c/logs", "/static/app.js", "/static/uPlot.iife.min.js"]
    cookie = f"mainboard-dashboard-{dash.base.rsplit(':', 1)[1]}=forged"
    for path in paths:
        for headers, query in (({}, ""), ({}, "?token=wrong"), ({"Cookie": cookie}, ""),
                               ({"Authorization": "token wrong"}, "")):
            status, body, _ = _status(dash.base + path + query, headers)
            assert status == 401, (path, query, headers, status)
            assert finished.run_id not in body and RUN_NAME not in body
    # the printed URL opens the page as is and leaves a cookie that opens the others
    status, body, headers = _status(dash.url)
    assert status == 200
    cookie_line = headers["Set-Cookie"]
    assert "HttpOnly" in cookie_line and "SameSite=Strict" in cookie_line
    status, _, _ = _status(f"{dash.base}/api/run/{RUN_NAME}",
                           {"Cookie": cookie_line.split(";")[0]})
    assert status == 200


def test_pages_show_the_finished_run_with_its_plots_the_jobs_and_the_fleet(
        dash: Dashboard, workspace: Config, finished: RunResult, tmp_path: Path,
        record_property: Any, capsys: pytest.CaptureFixture[str]) -> None:
    shot = tmp_path / "dashboard-run.png"
    hostile = "stage <b>evaluate</b> retried & re-sent"  # shown as text, never as markup
    with redis.Redis.from_url(workspace.broker.url) as r:
        append_logs(r, finished.run_id, [LogLine(time.time(), "warning", "w1@node", "node",
                                                 hostile, iteration=2, batch=1)])
    with Board(workspace.path) as board:  # a real job on this machine, for the jobs page
        job = board.on("local").submit(["sh", "-c", "echo dash-out; echo dash-err >&2; exit 3"],
                                       name="dash-job")
        job.wait(timeout=60, poll=0.2)

    async def look(tab: Tab) -> dict[str, Any]:
        refused = await tab.wait_for("401", 15)  # a browser without the token
        refused_status = tab.status
        await tab.goto(dash.page("/"))
        listing = await tab.wait_for(f'data-run-id="{finished.run_id}"', 15)
        await tab.goto(dash.page(f"/run/{RUN_NAME}"))  # by name, as a user types it
        html = await tab.wait_for(f'data-points="{finished.iterations}"', 15)
        html = await tab.wait_for('id="plot-grid" data-points', 5)
        ink = {box: await tab.evaluate(INK % box)
               for box in ("plot-convergence", "plot-chi2", "plot-rate", "plot-grid")}
        await tab.screenshot(shot)
        await tab.goto(dash.page("/jobs"))
        jobs = await tab.wait_until(f"(r => r && r.textContent)(document.querySelector("
                                    f"'tr[data-job=\"{job.id}\"]'))", 15)
        await tab.goto(f"{dash.base}/jobs/{job.id}/logs?stream=stderr")  # the page's link
        logs = await tab.wait_for("dash-err", 15)
        await tab.goto(f"{dash.base}/fleet")  # the cookie carries on
        fleet = await tab.wait_for("Every worker beating on the broker", 15)
        return {"refused": (refused_status, refused), "listing": listing, "html": html,
                "ink": ink, "jobs": jobs, "logs": logs, "fleet": fleet}

    seen = drive(f"{dash.base}/run/{finished.run_id}", look, timeout=120)  # above its waits
    kept = ARTIFACTS / shot.name  # outlives pytest's rotation of tmp dirs
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(shot, kept)
    record_property("screenshot", str(kept))
    with capsys.disabled():
        print(f"\ndashboard run page screenshot (test artifact): {kept}")
    status, refused = seen["refused"]
    assert status == 401 and RUN_NAME not in refused and finished.run_id not in refused.replace(
        f"/run/{finished.run_id}", "")
    assert RUN_NAME in seen["listing"] and "finished" in seen["listing"]
    html = seen["html"]
    assert f"{RUN_NAME} " in html and finished.run_id in html
    assert f'data-iteration="{finished.iterations}"' in html  # the iterations table
    assert "chi2/dof" in html and "Q" in html and "genz.gaussian" in html  # settings
    assert "vegas grid map" in html
    assert "&lt;b&gt;evaluate&lt;/b&gt; retried &amp; re-sent" in html and "<b>evaluate" not in html
    # the coordinator's "run started" and "run finished" lines, then the one appended above
    assert 'class="level-warning"' in html and "the last 3 of 3 lines kept" in html
    run = dash.api(f"/api/run/{finished.run_id}")  # who did the work, and when what happened
    assert [x["source"] for x in run["logs"]] == ["coordinator", "coordinator", "worker"]
    assert "<th>source</th>" in html
    assert re.search(r"<td[^>]*>w1@node</td><td>worker</td>", html), "the line's source shown"
    assert finished.exact is not None and run["exact"] == pytest.approx(finished.exact)
    assert 'class="u-label">exact<' in html  # the exact value: a line on the plot
    assert sum(w["batches"] for w in run["workers"]) == 3 * 4 and run["workers_note"] == ""
    assert all(w["kind"] == "local" and w["worker"] in html for w in run["workers"])
    kinds = [e["kind"] for e in run["timeline"]]
    assert kinds.count("dispatch") == kinds.count("snapshot") == finished.iterations
    assert "dispatch" in html and "snapshot" in html
    for box, ink in seen["ink"].items():
        assert ink > 500, f"{box} drew nothing ({ink} dark pixels)"
    assert shot.stat().st_size > 20_000
    assert "dash-job" in seen["jobs"] and "failed" in seen["jobs"] and "3" in seen["jobs"]
    assert "dash-err" in seen["logs"] and "dash-out" not in seen["logs"]
    assert "fleet workers" in seen["fleet"]


def test_lazy_receipts_fold_as_the_store_does(workspace: Config, finished: RunResult) -> None:
    """The dashboard's reader (snapshots left undecoded) folds to the store's own history."""
    store = RunStore(workspace.state_dir)
    lazy = LazyReceipts(store.path(finished.run_id))
    quick, full = store.fold(lazy, None), store.history(finished.run_id)
    assert quick is not None and full is not None
    assert [(i.iteration, i.samples, i.estimate, i.error, i.wall_s) for i in quick.iterations] \
        == [(i.iteration, i.samples, i.estimate, i.error, i.wall_s) for i in full.iterations]
    assert all(i.snapshot == {} for i in quick.iterations)  # nothing decoded yet
    assert [lazy.snapshot(i) for i in quick.iterations] == [i.snapshot for i in full.iterations]
    assert sorted(lazy.times) == [1, 2, 3] and quick.finished == full.finished


def test_lazy_receipts_keep_each_snapshot_with_its_line_past_a_bad_one(tmp_path: Path) -> None:
    """Snapshots are cut out by offset; a torn line between iterations (one whose snapshot
    was cut, then failed to decode) must not shift which snapshot belongs to which."""
    path = tmp_path / "r" / RECEIPTS_NAME
    log = Receipts(path)
    log.append(RunCreated(run_id="r", name="r", spec={}))
    for k in (1, 2, 3):
        log.append(IterationDone(run_id="r", iteration=k, samples=k, estimate=k, error=0.5,
                                 snapshot={"k": k}, wall_s=float(k)))
        if k == 1:
            with path.open("ab") as fh:
                fh.write(b'{"topic":"run.iteration","ts":1,"payload":{"snapshot":{"x":1},'
                         b'"wall_s":1}\n')
    lazy, errors = LazyReceipts(path), list[ReceiptError]()
    quick = RunStore(tmp_path).fold(lazy, errors)
    assert quick is not None and len(errors) == 1 and "not a JSON receipt line" in str(errors[0])
    assert [lazy.snapshot(i) for i in quick.iterations] == [{"k": 1}, {"k": 2}, {"k": 3}]


def test_a_paused_run_is_shown_paused_among_the_live_ones(
        dash: Dashboard, workspace: Config, finished: RunResult) -> None:
    source = workspace.state_dir / "runs" / finished.run_id / RECEIPTS_NAME
    path = copy_run(source, workspace.state_dir, "aaaa000000000001", "dash-paused", keep=2)
    Receipts(path).append(RunPaused(run_id="aaaa000000000001", iteration=2))
    rows = dash.api("/api/runs")["runs"]
    assert rows[0]["run_id"] == "aaaa000000000001" and rows[0]["status"] == "paused"
    assert dash.api("/api/run/dash-paused")["summary"]["status"] == "paused"
    assert "pause" in [e["kind"] for e in dash.api("/api/run/dash-paused")["timeline"]]


def test_process_sampler_diagnostics_and_clone_lineage_are_shown(
        dash: Dashboard, workspace: Config, finished: RunResult) -> None:
    """A clone whose last snapshot carries a process sampler's ``get_diagnostics``."""
    source = workspace.state_dir / "runs" / finished.run_id / RECEIPTS_NAME
    path = copy_run(source, workspace.state_dir, "fedcba9876543210", "dash-clone", keep=3)
    lines = path.read_text().splitlines()
    created, last = json.loads(lines[0]), json.loads(lines[-1])
    created["payload"].update(parent=finished.run_id, from_iteration=2,
                              snapshot={"samples": 80_000})
    last["payload"]["snapshot"]["sampler"] = {"kind": "process", "state": {}}
    reported = {"kind": "process", "version": 3, "process": {"acceptance": 0.25, "cells": [1, 2]}}
    last["payload"]["snapshot"]["diagnostics"] = reported  # as the coordinator stores it
    path.write_text("\n".join([json.dumps(created), *lines[1:-1], json.dumps(last)]) + "\n")
    run = dash.api("/api/run/dash-clone")
    assert run["diagnostics"] == {"kind": "process", "grid": None, "reported": reported}
    assert run["lineage"]["parent"] == finished.run_id and run["lineage"]["from_iteration"] == 2
    assert run["snapshots"][0] == {"iteration": 2, "samples": 80_000, "inherited": True}
    parent = dash.api(f"/api/run/{finished.run_id}")
    assert {"run_id": "fedcba9876543210", "name": "dash-clone", "from_iteration": 2,
            "status": "unfinished"} in parent["lineage"]["clones"]


def test_a_new_iteration_appears_on_the_open_page_without_a_reload(
        dash: Dashboard, workspace: Config, finished: RunResult) -> None:
    run_id = "0123456789abcdef"
    source_path = workspace.state_dir / "runs" / finished.run_id / RECEIPTS_NAME
    path = copy_run(source_path, workspace.state_dir, run_id, "dash-live", keep=2)
    source = source_path.read_text()
    third = next(line for line in source.splitlines()
                 if '"run.iteration"' in line and json.loads(line)["payload"]["iteration"] == 3)

    async def watch(tab: Tab) -> tuple[str, float, str]:
        before = await tab.wait_for('data-iteration="2"', 45)  # hang guards: events end them
        record = json.loads(third)
        record["payload"]["run_id"] = record["payload"]["snapshot"]["run_id"] = run_id
        with path.open("a") as log:  # what the coordinator's receipt write does
            log.write(json.dumps(record) + "\n")
        written = time.monotonic()
        after = await tab.wait_for('data-iteration="3"', 30, every=0.05)  # a hang guard
        return before, time.monotonic() - written, after

    before, waited, after = drive(dash.page(f"/run/{run_id}"), watch, timeout=120)
    print(f"\nnew iteration on the open page after {waited:.2f} s")
    assert 'data-iteration="3"' not in before
    assert 'data-iteration="3"' in after, f"not shown {waited:.2f} s after the receipt"
    assert 'data-points="3"' in after  # the plot grew too


@pytest.fixture
def crowded(tmp_path: Path, workspace: Config, finished: RunResult
            ) -> Iterator[tuple[Dashboard, RedisServer]]:
    """A workspace on its own Redis with 1,000 runs in the store, and its dashboard."""
    server = start_redis(tmp_path / "redis")
    config = write_workspace(tmp_path / "ws", server)
    fill(workspace.state_dir / "runs" / finished.run_id / RECEIPTS_NAME, config.state_dir, 1000)
    opener = tmp_path / "opener.sh"  # the "browser" --open starts: it notes the URL
    opener.write_text(f'#!/bin/sh\nprintf %s "$1" > {tmp_path}/opened\n')
    opener.chmod(0o755)
    dash = start_dashboard(config, "--open", env={"BROWSER": f"{opener} %s"})
    try:
        yield dash, server
    finally:
        stop_dashboard(dash)
        server.stop()


def test_thousand_runs_render_and_the_broker_going_down_is_shown(
        crowded: tuple[Dashboard, RedisServer]) -> None:
    dash, server = crowded
    opened = Path(server.dir).parent / "opened"  # --open handed the printed URL to the browser
    deadline = time.monotonic() + 60  # a hang guard: it opens the browser after the URL
    while not (opened.exists() and opened.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert opened.read_text() == dash.url
    data = dash.api("/api/runs")
    assert data["broker"]["ok"] and data["total"] == 1000 and len(data["runs"]) == 1000
    # the list carries its version: an opening page asks for the data at once, and its
    # next poll of the version finds it unchanged
    assert data["version"] == dash.api("/api/runs-version")["version"]

    rows = "document.querySelectorAll('tr[data-run-id]').length"
    banner = "(b => b.hidden ? '' : b.textContent)(document.getElementById('banner'))"

    async def watch(tab: Tab) -> tuple[int, str, str, str]:
        # hang guards, not budgets: each wait ends at its event (1,000 rows took 35 s once
        # under the whole suite on a slow machine, past the 20 + 10 s these guards had)
        shown = await tab.wait_until(f"{rows} === 1000 && {banner} === ''", 90)
        counted = await tab.evaluate("document.getElementById('runs-count').textContent")
        server.stop()  # the broker goes away under the open page
        down = await tab.wait_until(banner, 45)
        still = await tab.evaluate(f"{rows} + ' ' + document.querySelector("
                                   "'tr[data-run-id=\"00000000000003e7\"]').textContent")
        return shown, counted, down, still

    shown, counted, down, still = drive(dash.page("/"), watch, timeout=150)
    assert shown is True and counted.startswith("1–1000 of 1000 runs")
    assert "does not answer" in down and "showing what the receipts hold" in down
    assert still.startswith("1000 ") and "bulk-999" in still and "finished" in still
    data = dash.api("/api/runs")  # the API too: receipts only, and it says why
    assert not data["broker"]["ok"] and data["total"] == 1000
    assert f"127.0.0.1:{server.port}" in data["broker"]["message"]
    run = dash.api("/api/run/bulk-7")
    assert run["summary"]["status"] == "finished" and len(run["series"]) == 3
    assert "broker" in run["logs_note"] and "broker" in run["workers_note"]


def test_bad_port_and_busy_port_exit_2_with_one_line(workspace: Config) -> None:
    def dashboard(*args: str) -> Result:  # in this process: no interpreter start-up
        return CliRunner().invoke(cli, ["--config", str(workspace.path), "dashboard", *args])

    bad = dashboard("--port", "70000")
    assert bad.exit_code == 2 and "70000" in bad.stderr and not bad.stdout
    host = dashboard("--host", "no-such-host.invalid")
    assert host.exit_code == 2 and not host.stdout and host.stderr.count("\n") == 1
    assert "--host no-such-host.invalid: not an address" in host.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = dashboard("--port", str(port))
    assert busy.exit_code == 2 and not busy.stdout
    assert busy.stderr.strip().count("\n") == 0 and f"--port {port}" in busy.stderr
    assert busy.stderr.startswith("mainboard: error: ") and "Traceback" not in busy.stderr


def test_the_chi2_series_kept_between_refreshes_is_the_series_computed_afresh() -> None:
    """The run page keeps each run's chi2/dof and Q series and combines only new
    iterations; appended, changed (the run run again) or with another ``discard``, the
    series is the one computed from nothing, and the runs list's value is its last point."""
    import numpy as np

    from mainboard.dashboard.rundata import Chi2Memo, _chi2_now, _chi2_series
    from mainboard.integrators.accumulators import IterationEstimate, RunAccumulator

    def snapshot(means: list[float], discard: int = 0) -> dict[str, Any]:
        acc = RunAccumulator("real", 1, discard, [
            IterationEstimate(k, np.array([m]), np.array([1e-4 * (1 + k % 3)]), 1000, 0)
            for k, m in enumerate(means, 1)])
        return {"accumulator": acc.snapshot()}

    rng = np.random.default_rng(3)
    means = list(1.0 + 0.01 * rng.standard_normal(40))
    memo = Chi2Memo()
    for shown in (means[:10], means[:10], means[:25], [*means[:5], 2.0, *means[6:25]],
                  means[:40]):
        assert _chi2_series(snapshot(shown), memo) == _chi2_series(snapshot(shown))
    assert _chi2_series(snapshot(means, 3), memo) == _chi2_series(snapshot(means, 3))
    assert _chi2_now(snapshot(means, 3)) == _chi2_series(snapshot(means, 3))[-1][0]


def test_chi2_over_one_iteration_is_undefined_not_zero() -> None:
    """After one kept iteration chi2/dof and Q have no degrees of freedom: None (shown "-")."""
    import numpy as np

    from mainboard.dashboard.rundata import _chi2_now, _chi2_series
    from mainboard.integrators.accumulators import IterationEstimate, RunAccumulator

    def snapshot(means: list[float], discard: int = 0) -> dict[str, Any]:
        acc = RunAccumulator("real", 1, discard, [
            IterationEstimate(k, np.array([m]), np.array([1e-4]), 1000, 0)
            for k, m in enumerate(means, 1)])
        return {"accumulator": acc.snapshot()}

    assert _chi2_series(snapshot([1.0])) == [(None, None)]
    assert _chi2_now(snapshot([1.0])) is None
    series = _chi2_series(snapshot([1.0, 1.01, 0.99]))
    assert series[0] == (None, None) and all(v is not None for pair in series[1:] for v in pair)
    assert _chi2_now(snapshot([1.0, 1.01, 0.99], discard=2)) is None  # one kept after discard
    assert _chi2_now(snapshot([1.0, 1.01, 0.99])) == series[-1][0]


SYS_TGKILL = 234  # x86-64: a signal to one thread of another process (no Python wrapper)


def _threads(pid: int) -> list[int]:
    return sorted(int(t.name) for t in Path(f"/proc/{pid}/task").iterdir())


def test_ctrl_c_taken_by_a_pool_thread_still_stops_it_and_an_ignored_one_does_not(
        workspace: Config) -> None:
    """The kernel hands a process's SIGINT to any of its threads: one landing on a request
    thread must wake the server (it slept in select until the next request); a dashboard
    started with Ctrl-C ignored (nohup, a background job) serves on."""
    dash = start_dashboard(workspace)
    pid = dash.proc.pid
    dash.api("/api/runs")  # the request pool has its threads now
    others = [tid for tid in _threads(pid) if tid != pid]
    assert others, "no thread besides the main one"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(SYS_TGKILL, pid, others[-1], signal.SIGINT) == 0
    assert dash.proc.wait(60) == 130  # a hang guard, as stop_dashboard's

    dash = start_dashboard(workspace, ignore_ctrl_c=True)
    try:
        dash.proc.send_signal(signal.SIGINT)  # discarded by the kernel: SIG_IGN
        assert dash.api("/api/runs")["total"] >= 0 and dash.proc.poll() is None
    finally:
        dash.proc.terminate()
        dash.proc.wait(60)
