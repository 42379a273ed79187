"""What `mainboard --help` and `runs list` import (issue 30): only what they use. Checked on
``sys.modules`` of a new process that ran the verb, never by timing (bench/bench_startup.py
--parts cli times them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mainboard.receipts import IterationDone, RunCreated, RunFinished
from mainboard.runs.store import RunStore
from mainboard.services.broker import EmbeddedBroker
from tests.support.services import require

# Loaded by a verb that sends a task, connects, or integrates; never by these two.
HEAVY = ("celery", "kombu", "numpy", "redis", "paramiko", "cryptography", "rich")

# What the process holds, printed by an atexit handler: `integrate` ends through
# cli/common.end (os._exit once atexit ran), so nothing after main() would run.
PROBE = """
import atexit, json, sys
def report():
    heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
    receipts = sys.modules.get("mainboard.receipts")
    built = [] if receipts is None else sorted(
        c.__name__ for c in vars(receipts).values()
        if isinstance(c, type) and issubclass(c, receipts.Payload) and c is not receipts.Payload
        and c.__pydantic_complete__)
    print(json.dumps({"heavy": heavy, "built": built, "pydantic": "pydantic" in sys.modules,
                      "modules": sorted(sys.modules)}))
atexit.register(report)
sys.argv = ["mainboard", *json.loads(sys.argv[1])]
from mainboard.cli import main
main()
"""


RUN = """name = "startup-integrate"
seed = 3
[domain]
continuous = 2
[integrand]
kind = "genz.gaussian"
a = [5.0, 5.0]
u = [0.5, 0.5]
[sampler]
kind = "naive"
[stop]
max_samples = 2000
[batching]
batch_size = 1000
batches_per_iteration = 2
"""


def _loaded(ws: Path, *args: str, timeout: float = 120) -> dict[str, object]:
    """What a new process has imported once ``mainboard ARGS`` ran in ``ws``, and its exit
    code."""
    code = f"HEAVY = {HEAVY!r}\n" + PROBE
    done = subprocess.run([sys.executable, "-c", code, json.dumps(list(args))], cwd=ws,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "code": done.returncode}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with one finished run's receipts, written by the store the coordinator
    writes through."""
    (tmp_path / "mainboard.toml").write_text('[workspace]\nname = "startup"\n')
    store = RunStore(tmp_path / ".mainboard")
    run = "0123456789abcdef"
    store.record(RunCreated(run_id=run, name="startup", spec={"name": "startup"}))
    store.record(IterationDone(run_id=run, iteration=1, samples=1000, estimate=1.5, error=0.1))
    store.record(RunFinished(run_id=run, result={"estimate": 1.5, "error": 0.1}))
    return tmp_path


def test_help_imports_neither_pydantic_nor_any_heavy_library(ws: Path) -> None:
    loaded = _loaded(ws, "--help")
    assert loaded["code"] in (0, None)
    assert loaded["heavy"] == [] and loaded["pydantic"] is False, loaded


def test_runs_list_builds_only_the_receipt_models_it_reads(ws: Path) -> None:
    """The config is validated (pydantic), the run's three topics decoded; the other receipt
    models stay unbuilt and no broker, Celery, numpy or ssh library loads."""
    loaded = _loaded(ws, "runs", "list")
    assert loaded["code"] in (0, None)
    assert loaded["heavy"] == [], loaded
    assert loaded["built"] == ["IterationDone", "RunCreated", "RunFinished"], loaded


def test_integrate_without_a_fleet_loads_no_fleet_module_and_no_ssh(ws: Path) -> None:
    """A workspace with no fleet worker and no pool: the run's fleet sync is a door
    (fleet/prepare.py) that loads neither the sync, the keeper's client, the autoscaler nor
    paramiko; the run's answer still reaches stdout (printed before the quick exit)."""
    require("redis-server")
    (ws / "run.toml").write_text(RUN)
    try:
        loaded = _loaded(ws, "integrate", "run.toml", "--workers", "1", "--json",
                         timeout=240)
    finally:
        EmbeddedBroker(ws / ".mainboard").down()
    modules = set(loaded["modules"])  # type: ignore[arg-type]
    assert "paramiko" not in modules, sorted(m for m in modules if "paramiko" in m)[:5]
    fleet = sorted(m for m in modules if m.startswith("mainboard.fleet."))
    assert fleet == ["mainboard.fleet.prepare", "mainboard.fleet.records"], fleet
    assert {"celery", "numpy", "redis"} <= set(loaded["heavy"])  # type: ignore[arg-type]
