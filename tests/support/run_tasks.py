"""A run of ``[[tasks]]``: its head, its task tables, the CLI on its workspace, its task
receipts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from mainboard.config import Config
from mainboard.receipts import Receipts, TaskDone
from mainboard.runs.store import RECEIPTS_NAME
from tests.support.cliserver import popen_mainboard
from tests.support.integration import subprocess_env
from tests.support.workspace import run_cli

HEAD = """\
name = "tasks-gauss"
seed = 7
[domain]
continuous = 3
[integrand]
kind = "genz.gaussian"
a = [3.0, 3.0, 3.0]
u = [0.4, 0.5, 0.6]
[sampler]
kind = "vegas"
bins = 32
[stop]
max_samples = 20000
[batching]
batch_size = 4000
batches_per_iteration = 4
fuse = true
"""


def cli(config: Config, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    assert config.path is not None
    return run_cli(config.path, *args, env=subprocess_env(), timeout=timeout)


def task_receipts(config: Config, run_id: str) -> list[TaskDone]:
    path = config.state_dir / "runs" / run_id / RECEIPTS_NAME
    return [p for p in Receipts(path).read() if isinstance(p, TaskDone)]


def integrate_in_background(workspace: Config, path: Path,
                            workers: int = 1) -> subprocess.Popen[str]:
    """`mainboard integrate PATH --workers N --json` started, not waited for (``workers=0``:
    on a fleet the test module started)."""
    return popen_mainboard(
        ["--config", str(workspace.path), "integrate",
         str(path), "--workers", str(workers), "--json"], env=subprocess_env(),
        cwd=workspace.root,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def gauss(x: list[float]) -> float:
    """The run's Genz Gaussian at one point, as numpy computes it."""
    a, u = np.array([3.0, 3.0, 3.0]), np.array([0.4, 0.5, 0.6])
    return float(np.exp(-np.sum(a * a * (np.asarray(x) - u) ** 2)))


def _value(v: Any) -> str:
    """A TOML value: booleans, numbers, strings, lists, and dicts as inline tables."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return json.dumps(v)


def task(kind: str, name: str | None = None, geometry: dict[str, Any] | None = None,
         **keys: Any) -> str:
    """One ``[[tasks]]`` table as a user writes it: ``name``, ``kind``, the keys in order
    (``from_`` spelled ``from``), then its ``[tasks.geometry]``."""
    lines = ["[[tasks]]", *([f"name = {_value(name)}"] if name else []), f"kind = {_value(kind)}"]
    lines += [f"{k.rstrip('_')} = {_value(v)}" for k, v in keys.items()]
    if geometry:
        lines += ["[tasks.geometry]", *(f"{k} = {_value(v)}" for k, v in geometry.items())]
    return "\n".join(lines) + "\n"


def linspace(start: float, stop: float, count: int) -> dict[str, Any]:
    return {"start": start, "stop": stop, "count": count}


def line_along_x(offset: list[float], count: int) -> dict[str, Any]:
    """A plot_line geometry along x from ``offset``, over [0, 1] in ``count`` points."""
    return {"offset": offset, "direction": [1.0, 0.0, 0.0], "linspace": linspace(0.0, 1.0, count)}


def xy_plane(z: float, u: dict[str, Any], v: dict[str, Any]) -> dict[str, Any]:
    """An image geometry over the (x, y) plane at height ``z``."""
    return {"offset": [0.0, 0.0, z], "u_vector": [1.0, 0.0, 0.0], "v_vector": [0.0, 1.0, 0.0],
            "u_linspace": u, "v_linspace": v}
