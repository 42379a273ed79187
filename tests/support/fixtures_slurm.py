"""The test process's one real SLURM (import ``slurm_cluster`` into a test module to use it).

The cluster is a process-wide singleton even if several modules import this fixture
(pytest then holds one fixture definition per module); the last user to finish stops it.
Each xdist worker running SLURM files starts its own cluster (own ports, state and munge
socket: three run side by side on this machine); the SHARED_WORKER groups in conftest.py
decide which files share one. conftest.py imports it, so
every module can ask for ``slurm_cluster``.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.support.services import SlurmCluster, start_slurm

_shared: dict[str, object] = {"cluster": None, "users": 0}


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A real single-node SLURM 22.05 (partitions ``debug`` default, ``short`` 10 min max)."""
    if _shared["cluster"] is None:
        _shared["cluster"] = start_slurm(tmp_path_factory.mktemp("slurm"))
    _shared["users"] = int(_shared["users"]) + 1  # type: ignore[call-overload]
    cluster = _shared["cluster"]
    assert isinstance(cluster, SlurmCluster)
    yield cluster
    _shared["users"] = int(_shared["users"]) - 1  # type: ignore[call-overload]
    if _shared["users"] == 0:
        # Cancel what is still queued or running first: stopping slurmd under live jobs
        # would orphan their slurmstepd and the job processes.
        subprocess.run(["scancel", "--full", "--user", "root"], env=cluster.env,
                       capture_output=True, timeout=30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and subprocess.run(
                ["squeue", "-h"], env=cluster.env, capture_output=True, text=True,
                timeout=30).stdout.strip():
            time.sleep(0.5)
        cluster.stop()
        _shared["cluster"] = None
