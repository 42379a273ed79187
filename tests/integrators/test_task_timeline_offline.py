"""A run's ``[[tasks]]`` timeline without a broker: the raster points and values a worker
computes for ``plot_line``/``image``, the task file of ``runs append``, and every way a task
list is refused (one line naming the task's key and what is valid)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mainboard.errors import ConfigError
from mainboard.integrators import raster
from mainboard.integrators.spec import parse_run
from mainboard.integrators.spec_taskfile import load_task_file
from mainboard.integrators.spec_tasks import MAX_POINTS, Linspace
from mainboard.integrators.stages import build_run

BASE: dict[str, Any] = {
    "name": "t", "seed": 3, "domain": {"continuous": 2},
    "integrand": {"kind": "genz.gaussian", "a": [2.0, 2.0], "u": [0.5, 0.5]},
    "stop": {"max_samples": 1000}}
LINE = {"offset": [0.0, 0.5], "direction": [1.0, 0.0],
        "linspace": {"start": 0.0, "stop": 1.0, "count": 5}}
PLANE = {"offset": [0.0, 0.0], "u_vector": [1.0, 0.0], "v_vector": [0.0, 1.0],
         "u_linspace": {"start": 0.0, "stop": 1.0, "count": 3},
         "v_linspace": {"start": 0.25, "stop": 0.75, "count": 2}}


CHANNELS = {"kind": "channels", "coefficients": [1.0, 2.0, 3.0], "sigma": 0.5}


def gaussian(x: np.ndarray) -> np.ndarray:
    """genz.gaussian with a = 2, u = 0.5 in both dimensions."""
    return np.exp(-np.sum((2.0 * (x - 0.5)) ** 2, axis=1))


def with_tasks(*tasks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**BASE, **extra, "tasks": list(tasks)}


def test_a_line_and_a_plane_are_evaluated_on_their_points() -> None:
    run = build_run(parse_run(BASE))
    assert raster.point_count("plot_line", LINE) == 5
    assert raster.point_count("image", PLANE) == 6
    x = raster.points("plot_line", LINE, 1, 4)
    assert x.tolist() == [[0.25, 0.5], [0.5, 0.5], [0.75, 0.5]]
    np.testing.assert_allclose(raster.values(run, "plot_line", LINE, 1, 4)[:, 0], gaussian(x))
    # v outer, u inner: row 4 is u index 1, v index 1
    assert raster.coordinates("image", PLANE, 3, 6).tolist() == [
        [0.0, 0.75], [0.5, 0.75], [1.0, 0.75]]
    one = {**LINE, "linspace": {"start": 0.3, "stop": 9.0, "count": 1}}
    assert raster.points("plot_line", one, 0, 1).tolist() == [[0.3, 0.5]]
    assert Linspace(start=0.3, stop=9.0, count=1).values() == [0.3]
    assert Linspace(start=0.0, stop=1.0, count=3).values() == [0.0, 0.5, 1.0]


def test_values_go_through_the_transforms_times_their_jacobian() -> None:
    """With a transform, the raster shows the integrand as the sampler sees it."""
    spec = parse_run({**BASE, "transforms": [{"kind": "affine", "scale": [0.5, 0.5]}]})
    plain, scaled = build_run(parse_run(BASE)), build_run(spec)
    ones = raster.values(plain, "image", PLANE, 0, 6)[:, 0]
    through = raster.values(scaled, "image", PLANE, 0, 6)[:, 0]
    x = raster.points("image", PLANE, 0, 6)
    np.testing.assert_allclose(ones, gaussian(x))
    np.testing.assert_allclose(through, gaussian(0.5 * x) * 0.25)


def test_a_discrete_run_takes_the_geometry_indices() -> None:
    """``discrete`` picks the channel; left out, every discrete index is 0."""
    run = build_run(parse_run({**BASE, "domain": {"continuous": 1, "discrete": [3]},
                               "integrand": CHANNELS}))
    geometry = {"offset": [0.0], "direction": [1.0], "discrete": [2],
                "linspace": {"start": 0.0, "stop": 1.0, "count": 2}}
    third = raster.values(run, "plot_line", geometry, 0, 2)[:, 0]
    first = raster.values(run, "plot_line", {**geometry, "discrete": []}, 0, 2)[:, 0]
    np.testing.assert_allclose(third, 3.0 * first)


def test_tasks_as_written_keep_only_their_keys_and_set_the_stop() -> None:
    spec = parse_run(with_tasks(
        {"kind": "configure", "batching": {"batch_size": 100}},
        {"kind": "plot_line", "batch_transforms": [], "geometry": LINE},
        {"kind": "pause", "name": "hold"}))
    assert spec.model_dump(mode="json")["tasks"][2] == {"kind": "pause", "name": "hold"}
    steps = spec.task_steps()
    assert [(s.name, s.kind) for s in steps] == [
        ("configure-1", "configure"), ("plot_line-1", "plot_line"), ("hold", "pause")]
    assert steps[1].settings["batching"] == {"batch_size": 100}
    assert steps[1].settings["transforms"] == []
    run = steps[2].run_data(spec.model_dump(mode="json"))
    assert "tasks" not in run and run["batching"] == {"batch_size": 100}


BAD_TASKS = {
    "both-budgets": ({"kind": "sample", "nr_samples": 10, "stop": {"max_samples": 5}},
                     "tasks[0].nr_samples: give nr_samples or stop, not both"),
    "line-dims": ({"kind": "plot_line", "geometry": {**LINE, "direction": [1.0, 0.0, 0.0]}},
                  "tasks[0].geometry.direction: has 3 components"),
    "plane-discrete": ({"kind": "image", "geometry": {**PLANE, "discrete": [0]}},
                       "tasks[0].geometry.discrete: needs one index per discrete dimension"),
    "image-too-big": ({"kind": "image", "geometry": {
        **PLANE, "u_linspace": {"start": 0, "stop": 1, "count": MAX_POINTS},
        "v_linspace": {"start": 0, "stop": 1, "count": 2}}},
        f"tasks[0].geometry: the image has {MAX_POINTS} x 2 points"),
    "name-twice": ({"kind": "pause", "name": "sample-1"},
                   "tasks[1].name: task name 'sample-1' is used twice"),
    "invalid-run": ({"kind": "sample", "sampler": {"kind": "vegas", "bins": 0}},
                    "tasks[0]: task 'sample-1' (sample) would run with an invalid sampler"),
}


@pytest.mark.parametrize("task,says", BAD_TASKS.values(), ids=list(BAD_TASKS))
def test_a_bad_task_is_refused_naming_it(task: dict[str, Any], says: str) -> None:
    tasks = [task] if task.get("name") != "sample-1" else [{"kind": "sample"}, task]
    with pytest.raises(ConfigError) as info:
        parse_run(with_tasks(*tasks)).task_steps()
    assert says in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_the_discrete_indices_of_a_raster_are_checked_against_the_domain() -> None:
    data = with_tasks({"kind": "plot_line", "geometry": {
        "offset": [0.0], "direction": [1.0], "discrete": [3],
        "linspace": {"start": 0, "stop": 1, "count": 2}}},
        domain={"continuous": 1, "discrete": [3]}, integrand=CHANNELS)
    with pytest.raises(ConfigError, match=r"tasks\[0\]\.geometry\.discrete: needs one index"):
        parse_run(data).task_steps()
    data["tasks"][0]["geometry"]["discrete"] = [2]
    assert parse_run(data).task_steps()[0].kind == "plot_line"


@pytest.mark.parametrize("content,says", [
    (None, "task file not found"),
    (b"\xff\xfe", "cannot read task file"),
    (b"[[tasks]\n", "invalid TOML"),
    (b"title = 1\n", "title"),
    (b"", "tasks: the file holds no task"),
    (b'[[tasks]]\nkind = "pause"\nname = "sample-1"\n',
     "tasks[0].name: task name 'sample-1' is used twice"),
], ids=["missing", "not-utf8", "syntax", "unknown-key", "empty", "name-taken"])
def test_a_bad_task_file_is_one_line_naming_the_file(tmp_path: Path, content: bytes | None,
                                                     says: str) -> None:
    spec = parse_run(with_tasks({"kind": "sample", "nr_samples": 10}))
    path = tmp_path / "task.toml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_task_file(path, spec, spec.task_steps())
    message = str(info.value)
    assert message.startswith(str(path)) and says in message and "\n" not in message, message


def test_generated_names_skip_taken_ones_and_from_branches_the_timeline(tmp_path: Path) -> None:
    spec = parse_run(with_tasks(
        {"kind": "sample", "name": "sample-2", "nr_samples": 10},
        {"kind": "sample", "frozen": True},
        {"kind": "sample", "from": "sample-2", "nr_samples": 20}))
    steps = spec.task_steps()
    assert [(s.name, s.parent) for s in steps] == [("sample-2", None), ("sample-3", 0),
                                                   ("sample-4", 0)]
    assert [s.settings["frozen"] for s in steps] == [False, True, False]
    path = tmp_path / "task.toml"
    path.write_text('[[tasks]]\nkind = "sample"\nfrom = "sample-3"\n')
    assert load_task_file(path, spec, steps) == [{"kind": "sample", "from": "sample-3"}]
    path.write_text('[[tasks]]\nkind = "sample"\nfrom = "sample-9"\n')
    with pytest.raises(ConfigError, match=r"tasks\[0\]\.from: no earlier task is named "
                                          r"'sample-9' \(got 'sample-9'\); valid: sample-2, "):
        load_task_file(path, spec, steps)
