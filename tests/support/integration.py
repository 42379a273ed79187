"""Helpers for the tasks/coordinator tests: a workspace on the test Redis, run specs, fleets.

The workspace's mainboard.toml points ``[broker] url`` at the session's private
redis-server, so in-process calls and ``mainboard`` subprocesses share one broker, and
batch workers are real ``celery worker`` subprocesses (:class:`mainboard.tasks.workers.LocalWorkers`).
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mainboard.config import Config, load_config
from mainboard.integrators.driver import RunResult
from mainboard.tasks.workers import LocalWorkers
from tests.support.services import RedisServer

REPO = Path(__file__).resolve().parents[2]

GAUSS_4D: dict[str, Any] = {
    "name": "gauss-4d", "seed": 11,
    "domain": {"continuous": 4},
    "integrand": {"kind": "genz.gaussian", "a": [4.0] * 4, "u": [0.45] * 4},
    "sampler": {"kind": "vegas", "bins": 32, "alpha": 0.5},
    "stop": {"max_samples": 120_000},
    "batching": {"batch_size": 10_000, "batches_per_iteration": 4, "fuse": True},
}


MERGED = ("batching", "stop", "domain")


def spec(base: dict[str, Any] = GAUSS_4D, **tables: Any) -> dict[str, Any]:
    """A copy of ``base``; [batching], [stop] and [domain] keys merge, other tables replace."""
    out = copy.deepcopy(base)
    for key, value in tables.items():
        out[key] = {**out[key], **value} if key in MERGED and key in out else value
    return out


def slow_spec(delay: float, **tables: Any) -> dict[str, Any]:
    """A 3-d Gaussian through a Python integrand that sleeps ``delay`` s per batch."""
    base = spec(integrand={"kind": "python", "target": "tests.support.run_integrands:slow_gauss",
                           "params": {"delay": delay, "a": 4.0}},
                domain={"continuous": 3}, name="slow-3d")
    return spec(base, **tables)


def toml(data: dict[str, Any]) -> str:
    """A RUN.toml for a run dict (tables of scalars and lists; enough for these specs)."""
    def value(v: Any) -> str:
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()

    lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict | list)]
    for name, table in data.items():
        if isinstance(table, dict):
            lines.append(f"[{name}]")
            for k, v in table.items():
                if isinstance(v, dict):
                    inline = ", ".join(f"{ik} = {value(iv)}" for ik, iv in v.items())
                    lines.append(f"{k} = {{ {inline} }}")
                else:
                    lines.append(f"{k} = {value(v)}")
    return "\n".join(lines) + "\n"


def write_workspace(directory: Path, server: RedisServer) -> Config:
    """A workspace whose broker is the test Redis; returns its loaded config."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "mainboard.toml"
    path.write_text(f'[workspace]\nname = "tests"\n\n[broker]\nurl = "{server.url}"\n')
    return load_config(path)


def subprocess_env() -> dict[str, str]:
    """Environment for `mainboard` subprocesses: the repo importable (tests.support.run_integrands)."""
    env = {**os.environ, "COLUMNS": "200"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("MAINBOARD_CONFIG", None)
    env.pop("MAINBOARD_BROKER_URL", None)
    return env


def start_fleet(count: int, server: RedisServer, log_dir: Path) -> LocalWorkers:
    """``count`` real batch workers, waiting until every one has registered its queue."""
    fleet = LocalWorkers(count, server.url, log_dir, prefix="fleet",
                         env={"PYTHONPATH": subprocess_env()["PYTHONPATH"]}).start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all(p.poll() is None for p in fleet.procs) and ready(fleet, log_dir):
            return fleet
        time.sleep(0.2)
    fleet.stop()
    raise TimeoutError(f"workers not ready after 60 s; see {log_dir}")


def ready(fleet: LocalWorkers, log_dir: Path) -> bool:
    """True once every worker's log says it is ready."""
    logs = [log_dir / f"{node.split('@')[0]}.log" for node in fleet.nodes]
    return all(p.exists() and " ready." in p.read_text(errors="replace") for p in logs)


def fleet_iter(count: int, server: RedisServer, log_dir: Path) -> Iterator[LocalWorkers]:
    """Fixture body: a fleet for the duration of a test or module."""
    fleet = start_fleet(count, server, log_dir)
    try:
        yield fleet
    finally:
        fleet.stop()


def module_fixtures(workers: int) -> tuple[Any, Any]:
    """The module-scoped ``workspace`` and ``fleet`` fixtures (``workers`` local workers).

    Assign both in a test module (``workspace_fixture, fleet_fixture = module_fixtures(2)``);
    pytest finds them by their names, ``workspace`` and ``fleet``.
    """
    @pytest.fixture(scope="module", name="workspace")
    def workspace_fixture(tmp_path_factory: pytest.TempPathFactory,
                          redis_server: RedisServer) -> Config:
        return write_workspace(tmp_path_factory.mktemp("ws"), redis_server)

    @pytest.fixture(scope="module", name="fleet")
    def fleet_fixture(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
                      ) -> Iterator[LocalWorkers]:
        yield from fleet_iter(workers, redis_server, tmp_path_factory.mktemp("fleet"))

    return workspace_fixture, fleet_fixture
def same_numbers(a: RunResult, b: RunResult) -> None:
    """Every number of two results equal to the last bit (wall time aside)."""
    assert (a.estimate, a.error, a.chi2_dof, a.samples, a.iterations, a.nan_count) == \
           (b.estimate, b.error, b.chi2_dof, b.samples, b.iterations, b.nan_count)
    assert a.q == b.q or (a.q != a.q and b.q != b.q)  # NaN with a single iteration


def write_run(workspace: Config, name: str, data: dict[str, Any]) -> Path:
    """``data`` as the workspace's ``NAME.toml``."""
    path = workspace.root / f"{name}.toml"
    path.write_text(toml(data))
    return path
