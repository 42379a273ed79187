"""Live tier: a run with ``--workers 0`` on an autoscaled SLURM pool at zero (issue 19).

No worker exists when the run starts: the pool's host must get the workspace before the
run's batches go out, or the worker the keeper starts for them cannot import a module
that lives in the workspace. Here the integrand is such a module (next to the run file,
importing a helper from the workspace root), the pool's host is real SLURM whose root
is the shared provisioned root (not the workspace), and the run must finish with the
module's number, imported from the host's copy.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mainboard.fleet.autoscale import SCALE_TICK_ENV
from mainboard.fleet.records import read_fleet
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.fleet_helpers import (
    HOST_PYTHON,
    cli,
    provisioned_root,  # noqa: F401 - session fixture
    table,
    tear_down,
    workspace,
)
from tests.support.services import SlurmCluster
from tests.support.workspace_integrands import RUNS_DIR, assert_close, write_files

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]
TAG = "wsint_standby"


def test_a_workspace_module_runs_on_a_slurm_pool_grown_from_zero(
        tmp_path: Path, slurm_cluster: SlurmCluster, provisioned_root: Path) -> None:  # noqa: F811
    ws = workspace(tmp_path / "ws", table(
        "hosts.cluster", kind="slurm", partition="debug", root=str(provisioned_root),
        python=HOST_PYTHON, env={"SLURM_CONF": str(slurm_cluster.conf)}), table(
        "fleet.pools.standby", host="cluster", **{"max-jobs": 1, "idle-timeout": "1m"}))
    python_run, _ = write_files(ws, TAG, HOST_PYTHON, [])
    marker = provisioned_root / RUNS_DIR / f"{TAG}_mod.ran"
    marker.unlink(missing_ok=True)
    env = {SCALE_TICK_ENV: "0.5"}
    try:
        up = cli(ws, "fleet", "up", "--no-flower", "--json", env=env)
        assert up.returncode == 0 and json.loads(up.stdout)["started"] == [], up.stderr
        done = cli(ws, "integrate", str(python_run), "--workers", "0", "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert "pool 'standby' (autoscaled, up to 1 allocation(s) on cluster) starts one" \
            in done.stderr
        assert_close(SimpleNamespace(**json.loads(done.stdout)), 1.0)
        # imported on the SLURM worker from the host's copy, synced before the run
        assert marker.read_text() == str((provisioned_root / RUNS_DIR / f"{TAG}_mod.py")
                                         .resolve())
        assert not (ws / RUNS_DIR / f"{TAG}_mod.ran").exists()
        (worker,) = [w for w in read_fleet(ws / ".mainboard").started.values()
                     if w.pool == "standby"]
        assert worker.kind == "slurm"
    finally:
        down = tear_down(ws, "--timeout", "20")
    assert down.returncode == 0, down.stderr
