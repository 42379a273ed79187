"""The dashboard fits a laptop screen (issue 31): every page at 1,280 and 1,920 px in real
headless Chromium, with a real finished run, a real one-iteration run, a real local fleet
worker and a real job; no page scrolls sideways, long ids are shortened and copyable, plots
follow the window. chi2/dof of one iteration is undefined: '-' on the dashboard and in
`runs show`, null in its --json.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import mainboard
from mainboard.board import Board
from mainboard.cli import cli
from mainboard.cli.runview import result_json, result_text
from mainboard.config import Config, load_config
from mainboard.integrators.driver import RunResult
from mainboard.runs.store import RECEIPTS_NAME
from tests.support.chromium import Tab, drive, png_size
from tests.support.dashboard import MEASURE, Dashboard, start_dashboard, stop_dashboard
from tests.support.integration import spec, write_workspace
from tests.support.services import RedisServer

WIDTHS = (1280, 1920)
README_SHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard-run.png"
LONG_NAME = "gauss-4d-with-a-long-name-that-has-to-wrap-somewhere"
JOB_NAME = "calibrate-the-detector-response-for-every-channel-of-run-2026"
HOST = "workstation-under-the-desk-in-building-7"  # this machine, by a long name
LOG_LINE = "channel" * 60  # one 420-character word in the job's log
PLOT_WIDTH = "(p => p ? p.getBoundingClientRect().width : 0)" \
    "(document.querySelector('#plot-convergence .uplot canvas'))"


@dataclass
class Scene:
    """A workspace with what every dashboard page lists, and its running dashboard."""

    config: Config
    runs: RunResult
    one: RunResult
    job_id: str
    worker_id: str
    dash: Dashboard


def _mb(config: Config, *args: str) -> Any:
    """``mainboard --config C ARGS`` in this process (no interpreter start-up)."""
    return CliRunner().invoke(cli, ["--config", str(config.path), *args])


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
          ) -> Iterator[Scene]:
    config = write_workspace(tmp_path_factory.mktemp("dashfit"), redis_server)
    with config.path.open("a") as toml:
        toml.write(f'\n[hosts."{HOST}"]\nkind = "local"\n')
    config = load_config(config.path)
    runs = mainboard.integrate(spec(name=LONG_NAME), workers=1, config=config)
    one = mainboard.integrate(spec(name="fit-one", stop={"max_samples": 40_000}), workers=1,
                              config=config)
    with Board(config.path) as board:
        job = board.on(HOST).submit(["sh", "-c", f"echo {LOG_LINE}"], name=JOB_NAME)
        job.wait(timeout=60, poll=0.2)
    up = _mb(config, "fleet", "up", "--on", HOST, "--no-flower", "--json")
    assert up.exit_code == 0, up.stderr
    worker_id = json.loads(up.stdout)["started"][0]["worker_id"]
    dash = start_dashboard(config)
    try:
        yield Scene(config, runs, one, job.id, worker_id, dash)
    finally:
        try:
            stop_dashboard(dash)
        finally:
            down = _mb(config, "fleet", "down", "--timeout", "10")
    assert down.exit_code == 0, down.stderr


def test_runs_show_prints_a_dash_for_the_chi2_of_one_iteration_and_null_in_json(
        scene: Scene) -> None:
    assert scene.one.iterations == 1 and scene.one.chi2_dof is None
    assert scene.runs.iterations == 3 and scene.runs.chi2_dof is not None
    text = _mb(scene.config, "runs", "show", "fit-one")
    assert text.exit_code == 0 and text.stderr == ""
    (line,) = [x for x in text.stdout.splitlines() if x.startswith("result ")]
    assert line.endswith("chi2/dof -   Q -"), line
    shown = json.loads(_mb(scene.config, "runs", "show", "fit-one", "--json").stdout)
    assert shown["result"]["chi2_dof"] is None and shown["result"]["q"] is None
    three = _mb(scene.config, "runs", "show", scene.runs.run_id).stdout
    assert f"chi2/dof {scene.runs.chi2_dof:.3g}   Q {scene.runs.q:.3g}" in three
    assert "\nchi2/dof  -   Q -\n" in result_text(scene.one)  # what `integrate` prints
    printed = json.loads(result_json(scene.one))  # and with --json
    assert printed["chi2_dof"] is None and printed["q"] is None


def test_a_result_stored_with_chi2_zero_for_one_iteration_is_shown_undefined(
        scene: Scene, tmp_path: Path) -> None:
    """Receipts written before said 0 where Q was null: read as undefined too."""
    path = scene.config.state_dir / "runs" / scene.one.run_id / RECEIPTS_NAME
    kept = tmp_path / "receipts.ndjson"
    shutil.copy(path, kept)
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    assert last["topic"] == "run.finished" and last["payload"]["result"]["chi2_dof"] is None
    last["payload"]["result"]["chi2_dof"] = 0.0
    try:
        path.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
        shown = json.loads(_mb(scene.config, "runs", "show", "fit-one", "--json").stdout)
        assert shown["result"]["chi2_dof"] is None
        row = next(r for r in scene.dash.api("/api/runs")["runs"] if r["name"] == "fit-one")
        assert row["chi2_dof"] is None
    finally:
        shutil.copy(kept, path)


async def _measure(tab: Tab, ready: str) -> dict[str, Any]:
    assert await tab.wait_until(f"!!({ready})", 20), f"the page never showed {ready}"
    return json.loads(await tab.evaluate(MEASURE))


def test_every_page_fits_1280_and_1920_px_without_sideways_scrolling(
        scene: Scene, tmp_path: Path) -> None:
    run, one = scene.runs, scene.one
    pages = {  # name -> (path, what shows the page is filled)
        "runs": ("/", f"document.querySelector('tr[data-run-id=\"{one.run_id}\"]')"),
        "run": (f"/run/{run.run_id}", "document.querySelector('#plot-grid[data-points]') && "
                "document.querySelector('#plot-convergence[data-points=\"3\"]')"),
        "fleet": ("/fleet", f"document.querySelector('tr[data-worker=\"{scene.worker_id}\"]')"),
        "jobs": ("/jobs", f"document.querySelector('tr[data-job=\"{scene.job_id}\"]')"),
        "log": (f"/jobs/{scene.job_id}/logs?stream=stdout",
                f"document.body && document.body.textContent.includes('{LOG_LINE}')"),
    }

    async def look(tab: Tab) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for width in WIDTHS:
            await tab.resize(width, 900)
            for name, (path, ready) in pages.items():
                await tab.goto(scene.dash.page(path))
                seen[f"{name}-{width}"] = await _measure(tab, ready)
                await tab.screenshot(tmp_path / f"{name}-{width}.png")
                if name == "run":
                    seen[f"plot-{width}"] = await tab.evaluate(PLOT_WIDTH)
        # the open run page follows the window: 1,920 px, then 1,280 px without a reload
        await tab.goto(scene.dash.page(pages["run"][0]))
        await _measure(tab, pages["run"][1])
        wide = await tab.evaluate(PLOT_WIDTH)
        await tab.resize(1280, 900)
        seen["shrunk"] = await tab.wait_until(f"{PLOT_WIDTH} < {wide} && {PLOT_WIDTH}", 10)
        seen["resized"] = json.loads(await tab.evaluate(MEASURE))
        seen["wide"] = wide
        seen["cells"] = await tab.evaluate(  # the one-iteration run's chi2/dof on its page
            "[...document.querySelectorAll('#run-cards .card')].map(c => c.textContent)"
            ".join('|')")
        await tab.goto(scene.dash.page(f"/run/{one.run_id}"))
        await _measure(tab, "document.querySelector('#plot-convergence[data-points=\"1\"]')")
        seen["one-cards"] = await tab.evaluate(
            "[...document.querySelectorAll('#run-cards .card')].map(c => c.textContent)"
            ".join('|')")
        seen["one-row"] = await tab.evaluate(
            "[...document.querySelector('tr[data-iteration=\"1\"]').cells].map(c => c.textContent)")
        return seen

    seen = drive(scene.dash.page("/"), look, timeout=120)
    shown = [f"{name}-{width}" for width in WIDTHS for name in pages]
    misfits = {page: seen[page] for page in shown
               if seen[page]["scroll"] > seen[page]["client"] or seen[page]["out"]}
    assert not misfits, f"wider than the window, or with boxes sticking out: {misfits}"
    for page in shown:
        shot = tmp_path / f"{page}.png"
        assert shot.stat().st_size > 5_000, page
        assert png_size(shot) == (int(page.rsplit("-", 1)[1]), 900), page
    # the plots fill their boxes: wider on the wider screen
    assert 600 < seen["plot-1280"] < seen["plot-1920"]
    assert seen["shrunk"] and seen["shrunk"] < seen["wide"]
    resized = seen["resized"]
    assert resized["scroll"] <= resized["client"] <= 1280 and not resized["out"], resized
    assert "chi2/dof0" not in seen["one-cards"].replace(" ", "")
    assert "chi2/dof-" in seen["one-cards"] and "Q-" in seen["one-cards"]
    assert seen["one-row"][4:6] == ["-", "-"] and "±" in seen["one-row"][2]  # chi2/dof, Q


def test_long_ids_are_shortened_whole_on_hover_and_copied_by_a_click(scene: Scene) -> None:
    run = scene.runs

    async def look(tab: Tab) -> dict[str, Any]:
        await tab.cdp.call("Browser.grantPermissions", origin=scene.dash.base,
                           permissions=["clipboardReadWrite", "clipboardSanitizedWrite"])
        await tab.cdp.call("Emulation.setFocusEmulationEnabled", enabled=True)
        await tab.goto(scene.dash.page("/"))
        css = f'tr[data-run-id="{run.run_id}"] button.id'
        button = f"document.querySelector('{css}')"
        shown = await tab.wait_until(f"{button} && [{button}.textContent, {button}.title]", 20)
        await tab.click(css)
        copied = await tab.wait_until(f"{button}.classList.contains('copied')", 5)
        clip = await tab.evaluate("navigator.clipboard.readText()", wait=True)
        await tab.goto(scene.dash.page("/jobs"))
        css = f'tr[data-job="{scene.job_id}"] button.id'
        job = f"document.querySelector('{css}')"
        job_shown = await tab.wait_until(f"{job} && [{job}.textContent, {job}.dataset.full]", 20)
        name = await tab.evaluate(f"document.querySelector('tr[data-job=\"{scene.job_id}\"]')"
                                  ".textContent")
        # where the clipboard API refuses (plain http from another machine): the fallback
        await tab.evaluate("navigator.clipboard.writeText = () => Promise.reject("
                           "new Error('not a secure context'))")
        await tab.click(css)
        fallback = await tab.wait_until(f"{job}.classList.contains('copied')", 5)
        job_clip = await tab.evaluate("navigator.clipboard.readText()", wait=True)
        return {"shown": shown, "copied": copied, "clip": clip, "job": job_shown, "name": name,
                "fallback": fallback, "job_clip": job_clip}

    seen = drive(scene.dash.page("/"), look, timeout=60)
    assert seen["shown"] == [f"{run.run_id[:8]}…", run.run_id]
    assert seen["copied"] is True and seen["clip"] == run.run_id
    suffix = scene.job_id.rsplit("-", 1)[1]  # the unique suffix `mainboard jobs` takes
    assert seen["job"] == [f"…{suffix}", scene.job_id]
    assert JOB_NAME in seen["name"]  # names are not shortened: they wrap
    assert seen["fallback"] is True and seen["job_clip"] == scene.job_id
