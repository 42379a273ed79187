"""A run of ``[[tasks]]``: its head, the CLI on its workspace, its task receipts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from mainboard.config import Config
from mainboard.receipts import Receipts, TaskDone
from mainboard.runs.store import RECEIPTS_NAME
from tests.integration import subprocess_env
from tests.workspace import run_cli

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


def integrate_in_background(workspace: Config, path: Path) -> subprocess.Popen[str]:
    """`mainboard integrate PATH --workers 1 --json` started, not waited for."""
    return subprocess.Popen(
        [sys.executable, "-m", "mainboard", "--config", str(workspace.path), "integrate",
         str(path), "--workers", "1", "--json"], env=subprocess_env(), cwd=workspace.root,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def gauss(x: list[float]) -> float:
    """The run's Genz Gaussian at one point, as numpy computes it."""
    a, u = np.array([3.0, 3.0, 3.0]), np.array([0.4, 0.5, 0.6])
    return float(np.exp(-np.sum(a * a * (np.asarray(x) - u) ** 2)))
