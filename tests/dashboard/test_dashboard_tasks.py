"""The run page's task views in real headless Chromium: the task table (as `runs tasks`
lists it), a line plot per plot_line task and a heat map per image task, fed by
``api/run/ID/tasks`` under the dashboard's ``--base-path``.

A real run of tasks (real Redis, a real Celery worker): a sample task, a plot_line along
x and an image over the (x, y) plane of a Genz Gaussian, whose values are known. The page
is checked for what a person sees: the rows' cells, uPlot's points drawn on its canvas at
the values, and the heat map's pixels in the colours of the values (brightest at the
largest, darkest at the smallest).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import mainboard
from mainboard.config import Config
from mainboard.integrators.driver import RunResult
from tests.support.chromium import Tab, drive
from tests.support.dashboard import Dashboard, start_dashboard, stop_dashboard
from tests.support.integration import write_workspace
from tests.support.run_tasks import HEAD, cli, gauss, line_along_x, linspace, task, xy_plane
from tests.support.services import RedisServer

pytestmark = pytest.mark.live

TASKS = "\n".join([
    task("sample", "train", nr_samples=16000),
    task("plot_line", "along-x", geometry=line_along_x([0.0, 0.5, 0.5], 11)),
    task("image", "plane", geometry=xy_plane(0.6, linspace(0.0, 1.0, 5), linspace(0.1, 0.7, 4)))])
BASE = "/board/"
ROWS = """JSON.stringify([...document.querySelectorAll('#tasks tbody tr')]
  .map((tr) => [...tr.cells].map((c) => c.textContent)))"""
# every point of the plot's first series: its value and the canvas pixel drawn there
POINTS = """JSON.stringify((() => { const u = plots['task-1'];
  return u.data[0].map((x, i) => { const y = u.data[1][i];
    const px = Math.round(u.valToPos(x, 'x', true)), py = Math.round(u.valToPos(y, 'y', true));
    return { x, y, pixel: [...u.ctx.getImageData(px, py, 1, 1).data] }; }); })())"""
# every cell of the heat map: the pixel at its middle and the colour its value maps to
CELLS = """JSON.stringify((() => { const c = document.querySelector('canvas.heat[data-task="2"]');
  const nu = +c.dataset.nu, nv = +c.dataset.nv, ctx = c.getContext('2d'), out = [];
  for (let j = 0; j < nv; j++) for (let i = 0; i < nu; i++) {
    const x = Math.floor((i + 0.5) * c.width / nu), y = Math.floor((nv - j - 0.5) * c.height / nv);
    out.push({ i, j, pixel: [...ctx.getImageData(x, y, 1, 1).data] }); }
  return { nu, nv, width: c.width, height: c.height, cells: out }; })())"""


@dataclass
class Scene:
    config: Config
    result: RunResult
    dash: Dashboard


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
          ) -> Iterator[Scene]:
    config = write_workspace(tmp_path_factory.mktemp("dashtasks"), redis_server)
    path = config.root / "tasks.toml"
    path.write_text(HEAD.replace('"tasks-gauss"', '"dash-tasks"') + TASKS)
    result = mainboard.integrate(path, workers=1, config=config)
    dash = start_dashboard(config, "--base-path", BASE)
    try:
        yield Scene(config, result, dash)
    finally:
        stop_dashboard(dash)


def test_the_tasks_api_is_served_under_the_base_path(scene: Scene) -> None:
    """The table `runs tasks --json` prints, and the rasters' values: the integrand's."""
    assert scene.dash.base.endswith("/board")
    data = scene.dash.api(f"/api/run/{scene.result.run_id}/tasks")
    listed = json.loads(cli(scene.config, "runs", "tasks", scene.result.run_id, "--json").stdout)
    assert data["tasks"] == listed["tasks"] and data["status"] == "finished"
    line, image = data["rasters"]
    assert (line["name"], line["kind"], line["columns"]) == ("along-x", "plot_line", ["value"])
    assert line["x"] == pytest.approx([i / 10 for i in range(11)])
    assert line["y"][0] == pytest.approx([gauss([t, 0.5, 0.5]) for t in line["x"]], rel=1e-12)
    assert image["u"] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    assert image["v"] == pytest.approx([0.1, 0.3, 0.5, 0.7])
    np.testing.assert_allclose(image["z"], [[gauss([u, v, 0.6]) for u in image["u"]]
                                            for v in image["v"]], rtol=1e-12)
    assert image["zmax"] == max(map(max, image["z"]))


def _look(scene: Scene, check: str) -> Any:
    async def look(tab: Tab) -> Any:
        if not await tab.wait_until(f"!!({check})", 20):
            raise AssertionError(f"the page never showed {check}: " + str(await tab.evaluate(
                "JSON.stringify([typeof renderTasks, document.getElementById('tasks-note')"
                "?.textContent, document.getElementById('tasks-section')?.outerHTML"
                "?.slice(0, 3000), document.getElementById('fresh').textContent])")))
        return {"rows": json.loads(await tab.evaluate(ROWS)),
                "points": json.loads(await tab.evaluate(POINTS)),
                "cells": json.loads(await tab.evaluate(CELLS)),
                "heat": await tab.evaluate("heatColor(1).concat(heatColor(0))")}

    return drive(scene.dash.page(f"/run/{scene.result.run_id}"), look, timeout=40)


def test_the_run_page_draws_the_task_table_the_line_plot_and_the_heat_map(
        scene: Scene) -> None:
    seen = _look(scene, "plots['task-1'] && document.querySelector('canvas.heat') && "
                 "document.querySelectorAll('#tasks tbody tr').length === 3")
    rows = seen["rows"]
    assert [r[:5] for r in rows] == [["0", "train", "sample", "done", ""],
                                     ["1", "along-x", "plot_line", "done", "train"],
                                     ["2", "plane", "image", "done", "along-x"]]
    assert [r[5] for r in rows] == ["16,000", "0", "0"]
    assert rows[1][6] == "11 points" and rows[2][6] == "20 points"
    assert " ± " in rows[0][6]

    # the line plot: 11 points at the integrand's values, each drawn in the series' colour
    points = seen["points"]
    assert [p["x"] for p in points] == pytest.approx([i / 10 for i in range(11)])
    assert [p["y"] for p in points] == pytest.approx(
        [gauss([i / 10, 0.5, 0.5]) for i in range(11)], rel=1e-12)
    for p in points:
        assert p["pixel"][3] == 255 and np.allclose(p["pixel"][:3], [31, 119, 180], atol=24), p

    # the heat map: one cell per point, the brightest colour at the largest value
    cells = seen["cells"]
    assert (cells["nu"], cells["nv"]) == (5, 4) and cells["width"] > 0
    u, v = np.linspace(0, 1, 5), np.linspace(0.1, 0.7, 4)
    z = np.array([[gauss([a, b, 0.6]) for a in u] for b in v])
    pixel = {(c["i"], c["j"]): c["pixel"] for c in cells["cells"]}
    top, bottom = seen["heat"][:3], seen["heat"][3:]
    assert top == [253, 231, 37] and bottom == [68, 1, 84]
    jmax, imax = np.unravel_index(np.argmax(z), z.shape)
    jmin, imin = np.unravel_index(np.argmin(z), z.shape)
    assert pixel[(int(imax), int(jmax))] == [*top, 255]
    assert pixel[(int(imin), int(jmin))] == [*bottom, 255]
    # a larger value is never drawn darker (viridis brightens monotonically: the sum of
    # its channels grows from stop to stop)
    order = sorted(pixel, key=lambda ij: z[ij[1], ij[0]])
    brightness = [sum(pixel[ij][:3]) for ij in order]
    assert brightness == sorted(brightness) and len(set(map(tuple, pixel.values()))) > 10
