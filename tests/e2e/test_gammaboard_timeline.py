"""Live tier, issue 26's whole promise in one file: a gammaboard run file as its users write
it (a process evaluator written with ``gammaboard_process``, a ``[[task_queue]]`` of train,
sample with the trained sampler frozen, ``plot_line``, and a second sample from the first
task) runs to the end unchanged, on 2 local workers and on an ssh fleet host (loopback
sshd, the workspace mirrored to the host's root, no local worker).

Each run: ``runs tasks`` shows the 4 tasks done, the frozen sample's estimate is within 4
sigma of the exact value, the plot line's values are the integrand's along the line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fleet_helpers import (
    batch_consumers,
    cli,
    provisioned_root,  # noqa: F401 - session fixture
    ssh_host,
    tear_down,
    up_ok,
    wait_until,
    workspace,
)
from tests.support.services import SshServer

pytestmark = [pytest.mark.live, pytest.mark.timeout(400)]

# f(x) = 3 x0^2 * 2 x1 on the unit square: exactly 1.
PROGRAM = '''\
from gammaboard_process import Evaluator, run_evaluator


class Peak(Evaluator):
    def eval(self, xs_discrete, xs_continuous):
        return 3.0 * xs_continuous[:, 0] ** 2 * 2.0 * xs_continuous[:, 1]


run_evaluator(Peak)
'''


def run_file(python: str) -> str:
    """The gammaboard run file, with the interpreter that has ``gammaboard_process``."""
    return f'''name = "gb-timeline"
target = {{ kind = "scalar", value = 1.0 }}
[evaluator]
kind = "process_evaluator"
command = [{json.dumps(python)}, "-u", "peak.py"]
cwd = "$resources"
domain = {{ continuous = {{ dims = 2 }} }}
[sampler_aggregator_runner_params]
max_batch_size = 2_000
[[task_queue]]
name = "train"
kind = "sample"
nr_samples = 24_000
observable = {{ config = "scalar" }}
sampler_aggregator = {{ config = {{ kind = "havana_training", seed = 3, bins = 16, samples_for_update = 8_000 }} }}
[[task_queue]]
name = "frozen"
kind = "sample"
nr_samples = 16_000
sampler_aggregator = {{ config = {{ kind = "havana_inference" }} }}
[[task_queue]]
name = "line"
kind = "plot_line"
observable = "scalar"
[task_queue.geometry]
offset = [0.5, 0.5]
direction = [1.0, 0.0]
linspace = {{ start = -0.25, stop = 0.25, count = 5 }}
discrete = []
[[task_queue]]
name = "again"
kind = "sample"
nr_samples = 8_000
sampler_aggregator = {{ from_name = "train" }}
observable = {{ from_name = "train" }}
'''


def run_timeline(ws: Path, python: str, *workers: str) -> None:
    """Write the program and the run file into ``ws/gb``, integrate, check the timeline."""
    folder = ws / "gb"
    folder.mkdir(exist_ok=True)
    (folder / "peak.py").write_text(PROGRAM)
    path = folder / "timeline.toml"
    path.write_text(run_file(python))
    done = cli(ws, "integrate", str(path), *workers, "--json", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    listed = cli(ws, "runs", "tasks", got["run_id"], "--json")
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout and json.loads(listed.stdout)["tasks"]
    assert [(r["name"], r["state"]) for r in rows] == [
        ("train", "done"), ("frozen", "done"), ("line", "done"), ("again", "done")]
    frozen = rows[1]
    assert frozen["frozen"] is True and frozen["samples"] == 16_000
    assert abs(frozen["estimate"] - 1.0) < 4 * frozen["error"], frozen
    assert rows[3]["from"] == "train"
    exported = cli(ws, "runs", "export", got["run_id"], "--format", "csv")
    assert exported.returncode == 0, exported.stderr
    header, *lines = exported.stdout.splitlines()
    assert len([x for x in lines if x.startswith("line,")]) == 5, exported.stdout


def test_a_gammaboard_timeline_runs_unchanged_on_two_local_workers(tmp_path: Path) -> None:
    import sys

    ws = workspace(tmp_path / "ws")
    try:
        run_timeline(ws, sys.executable, "--workers", "2")
    finally:
        tear_down(ws)


def test_a_gammaboard_timeline_runs_unchanged_on_an_ssh_fleet_host(
        tmp_path: Path, sshd_server: SshServer, provisioned_root: Path) -> None:  # noqa: F811
    from mainboard.fleet.records import read_fleet

    ws = workspace(tmp_path / "ws", ssh_host("lo", sshd_server, provisioned_root))
    try:
        up_ok(ws, "--on", "lo", "--no-flower")
        wait_until(lambda: batch_consumers(ws) > 0, 120, "the ssh host's worker online")
        (worker,) = read_fleet(ws / ".mainboard").live()
        run_timeline(ws, worker.python, "--workers", "0")
    finally:
        tear_down(ws)
