"""gammaboard's process programs run under mainboard unchanged (issue 26, item 3).

gammaboard's four minimal programs from its process-runtime docs (evaluator, sampler,
batch transform, materializer; ``tests/gammaboard_programs/``, completed only where the
docs elide arrays) run through ``mainboard integrate`` on real Redis and two real Celery
workers, importing ``gammaboard_process`` as written. The helper package also installs
alone into a bare venv. Run log lines say who wrote them: ``worker``, ``coordinator`` or
``process`` (a program's own ``log()``), in ``runs logs`` (text and ``--json``) and in the
dashboard's run logs.
"""

from __future__ import annotations

import ast
import json
import logging
import shutil
import socket
import subprocess
import sys
import time
import venv
from pathlib import Path

import numpy as np
import pytest
import redis

import gammaboard_process
import mainboard.integrators.process as host_side
from mainboard import keys
from mainboard.config import Config
from mainboard.dashboard.runextras import _logs as dashboard_logs
from mainboard.integrators.process.client import ProcessClient
from mainboard.runs.logs import LogLine, read_logs
from mainboard.runs.store import RunStore
from mainboard.tasks.steering import PROCESS_LOGGER, Steering, relay_process_lines
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import REPO, module_fixtures, subprocess_env
from tests.support.services import RedisServer, unavailable
from tests.support.workspace import run_cli

PROGRAMS = REPO / "tests" / "gammaboard_programs"
PACKAGE = REPO / "gammaboard-process"
SOURCES = {"worker", "coordinator", "process"}
BATCH, BATCHES, ITERATIONS = 1024, 3, 2  # the sampler plans 1024-sample batches

workspace_fixture, fleet_fixture = module_fixtures(2)


def command(program: str, python: str = sys.executable) -> str:
    """A TOML argv list running one of the gammaboard programs (JSON strings are TOML)."""
    return json.dumps([python, str(PROGRAMS / program)])


def run_file(directory: Path) -> Path:
    """A run using all four process kinds: f(x) = x0 on the unit square, exact 1/2."""
    path = directory / "gb-programs.toml"
    path.write_text(f'''name = "gb-programs"
seed = 3
[domain]
continuous = 2
[integrand]
kind = "process"
command = {command("evaluator.py")}
exact = 0.5
[sampler]
kind = "process"
command = {command("sampler.py")}
[sampler.materializer]
kind = "process"
command = {command("materializer.py")}
[[transforms]]
kind = "process"
command = {command("batch_transform.py")}
[stop]
max_iterations = {ITERATIONS}
[batching]
batch_size = {BATCH}
batches_per_iteration = {BATCHES}
''')
    return path


def await_sources(r: redis.Redis, run_id: str, deadline_s: float = 60.0) -> None:
    """Block on the run's log stream until a line of every source is there (workers ship
    theirs from a background thread, so the last may land just after the run ends)."""
    seen: set[str] = set()
    cursor, end = "0-0", time.monotonic() + deadline_s
    while seen != SOURCES and time.monotonic() < end:
        for _, entries in r.xread({keys.run_logs(run_id): cursor}, count=1000, block=1000):
            for entry_id, fields in entries:
                cursor = entry_id.decode()
                seen.add(LogLine.from_entry(entry_id, fields).source)
    assert seen == SOURCES, f"sources seen in the run's log: {sorted(seen)}"


@pytest.mark.live
def test_gammaboards_four_programs_run_unchanged_and_their_lines_say_who_wrote_them(
        workspace: Config, fleet: LocalWorkers, redis_server: RedisServer) -> None:
    assert workspace.path is not None
    env = subprocess_env()
    done = run_cli(workspace.path, "integrate", str(run_file(workspace.root)), "--json",
                   env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got["samples"] == BATCH * BATCHES * ITERATIONS and got["exact"] == 0.5
    assert got["nan_count"] == 0
    assert abs(got["estimate"] - 0.5) < 4 * got["error"], got

    r = redis.Redis.from_url(redis_server.url)
    await_sources(r, got["run_id"])
    shown = run_cli(workspace.path, "runs", "logs", "gb-programs", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    lines = [json.loads(x) for x in shown.stdout.splitlines()]
    nodes = {n.replace("%h", socket.gethostname()) for n in fleet.nodes}
    by_source = {s: [x for x in lines if x["source"] == s] for s in SOURCES}
    said = [x for x in by_source["process"] if x["message"].endswith("gammaboard evaluator ready")]
    assert said and all(x["level"] == "info" for x in said)
    # relayed by the batch workers; the coordinator, which starts the evaluator once to learn
    # its metadata, may relay its copy's line too (whether it lands first is a race)
    assert {x["worker"] for x in said} & nodes
    assert {x["worker"] for x in said} <= nodes | {"coordinator"}
    assert any(x["message"].startswith("started the evaluator process")
               and x["worker"] in nodes for x in by_source["worker"])
    messages = [x["message"] for x in by_source["coordinator"]]
    assert "run started" in messages and any(m.startswith("run finished: 0.") for m in messages)
    # the sampler runs beside the coordinator, which relays mainboard's line about it
    assert any(m.startswith("started the sampler process") for m in messages)

    text = run_cli(workspace.path, "runs", "logs", "gb-programs", env=env)
    assert text.returncode == 0, text.stderr
    assert any("[process]" in x and x.endswith("gammaboard evaluator ready")
               for x in text.stdout.splitlines())
    assert any(" coordinator [coordinator]: run started" in x for x in text.stdout.splitlines())

    page, _ = dashboard_logs(r, got["run_id"])
    assert {x["source"] for x in page} == SOURCES


def test_one_helper_both_import_paths_and_nothing_but_numpy() -> None:
    """mainboard's old import path is the package itself (one source of truth), and the
    package imports only the standard library, numpy and itself."""
    assert host_side.Evaluator is gammaboard_process.Evaluator
    assert host_side.run_sampler is gammaboard_process.run_sampler
    assert Path(gammaboard_process.__file__).resolve().parent == PACKAGE / "gammaboard_process"
    allowed = set(sys.stdlib_module_names) | {"numpy", "gammaboard_process"}
    for path in (PACKAGE / "gammaboard_process").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert {n.split(".")[0] for n in names} <= allowed, f"{path.name} imports {names}"


def pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """This environment's pip installing into ``python``'s (``--python``: no ensurepip)."""
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "-q", "--no-compile", *args], capture_output=True, text=True,
                          timeout=300)


def test_the_helper_installs_alone_into_a_bare_venv_and_serves_a_program(
        tmp_path: Path) -> None:
    """``pip install --no-deps --no-build-isolation`` of the folder (copied: an in-tree build
    would leave build/ and egg-info in the repository) into a venv without site-packages;
    its build backend (setuptools) and numpy come from this machine's index or pip cache."""
    venv.create(tmp_path / "venv", with_pip=False, system_site_packages=False)
    python = tmp_path / "venv" / "bin" / "python"
    source = shutil.copytree(PACKAGE, tmp_path / "src", ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info"))
    for need in ("setuptools>=77", "numpy"):
        if (got := pip(python, "--no-deps", need)).returncode != 0:
            unavailable(f"cannot pip install {need} into a fresh venv: {got.stderr[-500:]}")
    done = pip(python, "--no-deps", "--no-build-isolation", str(source))
    assert done.returncode == 0, done.stderr[-2000:]

    probe = subprocess.run([str(python), "-c", "import gammaboard_process as g; "
                            "print(g.__file__); print(sorted(g.__all__))"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    where, names = probe.stdout.splitlines()
    assert where.startswith(str(tmp_path / "venv")), where
    assert {"Evaluator", "Sampler", "BatchTransform", "Materializer", "SampleBatch",
            "TransformedBatch", "MaterializedBatch", "run_evaluator", "run_sampler",
            "run_batch_transform", "run_materializer", "log"} <= set(eval(names))
    alone = subprocess.run([str(python), "-c", "import mainboard"], capture_output=True,
                           cwd=tmp_path)
    assert alone.returncode != 0, "the bare venv must not see mainboard"

    x = np.random.default_rng(2).random((6, 2))
    client = ProcessClient([str(python), str(PROGRAMS / "evaluator.py")], role="evaluator",
                           cwd=tmp_path, request_timeout=60)
    with client:
        client.start()
        client.initialize({"domain": {"continuous": {"dims": 2}}, "args": {}})
        _, blob = client.request("eval_batch", {"nr_samples": 6}, x)
    np.testing.assert_array_equal(np.frombuffer(blob), x[:, 0])
    assert client.returncode == 0


def test_a_line_stored_before_sources_were_recorded_is_told_by_its_writer(
        redis_server: RedisServer) -> None:
    """Run logs kept from before this change have no ``src`` field: the coordinator's
    lines are signed ``coordinator``, everything else came from workers."""
    r = redis.Redis.from_url(redis_server.url)
    run_id = "c10c0000000000b1"
    for worker in ("coordinator", "local-1@host"):
        r.xadd(keys.run_logs(run_id), {"ts": "1.0", "level": "info", "worker": worker,
                                       "host": "h", "msg": f"from {worker}"})
    assert [(x.worker, x.source) for x in read_logs(r, run_id)] == [
        ("coordinator", "coordinator"), ("local-1@host", "worker")]


@pytest.mark.parametrize(("floor", "ready", "warned"), [
    ("warn", False, False),   # info lines are dropped in the process
    ("INFO", True, False),
    ("loud", True, True),     # not a level: said once, naming it and the valid ones
])
def test_gammaboard_log_level_quietens_a_program_and_a_bad_value_is_named(
        floor: str, ready: bool, warned: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mainboard.process")
    client = ProcessClient([sys.executable, str(PROGRAMS / "evaluator.py")], role="evaluator",
                           env={"GAMMABOARD_LOG_LEVEL": floor}, request_timeout=60)
    with client:
        client.start()
        client.initialize({"domain": {"continuous": {"dims": 1}}, "args": {}})
    said = [(r.levelno, r.getMessage().split("] ", 1)[-1]) for r in caplog.records]
    assert ((logging.INFO, "gammaboard evaluator ready") in said) is ready
    bad = (logging.WARNING, "GAMMABOARD_LOG_LEVEL='loud' is not a log level; valid: trace, "
                            "debug, info, warn, error; logging every level")
    assert (bad in said) is warned and said.count(bad) <= 1


def test_the_coordinator_relays_its_processes_lines_of_its_run_only(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """A process sampler runs beside the coordinator: its lines (and mainboard's about it)
    reach that run's log, another run's do not, and the logger is closed again after."""
    r = redis.Redis.from_url(redis_server.url)
    run_id, logger = "c10c0000000000b2", logging.getLogger(PROCESS_LOGGER)
    before = logger.level
    with relay_process_lines(Steering(r, RunStore(tmp_path), run_id)):
        assert logger.isEnabledFor(logging.INFO)
        ours = {"process_run": run_id, "process_role": "sampler"}
        logger.info("[sampler x] from the sampler", extra=ours)
        logger.info("started the sampler process `x`", extra={"process_run": run_id})
        logger.warning("[sampler y] another run", extra={**ours, "process_run": "other"})
    assert logger.level == before
    assert [(x.source, x.worker, x.level, x.message) for x in read_logs(r, run_id)] == [
        ("process", "coordinator", "info", "[sampler x] from the sampler"),
        ("coordinator", "coordinator", "info", "started the sampler process `x`")]
