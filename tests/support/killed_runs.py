"""A coordinator SIGKILLed mid-run and the run resumed: the kill/resume tests' one procedure
(the plain run's, and the one with an iteration sent ahead)."""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

from mainboard.config import Config
from mainboard.integrators.driver import RunResult
from mainboard.receipts import Receipts
from tests.support.cliserver import popen_mainboard
from tests.support.integration import subprocess_env, write_run
from tests.support.outage import reference, run_id_of, wait_iteration
from tests.support.run_tasks import cli


@dataclass
class Killed:
    """A run whose coordinator was killed: its id, its receipts, its uninterrupted numbers."""

    run_id: str
    receipts: Receipts
    reference: RunResult


def kill_after(workspace: Config, name: str, run: dict[str, Any], iteration: int) -> Killed:
    """Integrate ``run`` (a slow_spec: its ``delay`` is dropped for the reference) on 2 local
    workers and SIGKILL the coordinator once ``iteration`` is recorded (an event, with
    ``wait_iteration``'s hang guard)."""
    path = write_run(workspace, name, run)
    uninterrupted = reference(run)  # the same values without the sleeping
    assert workspace.path is not None
    coordinator = popen_mainboard(
        ["--config", str(workspace.path), "integrate",
         str(path), "--workers", "2"], env=subprocess_env(), cwd=workspace.root,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_id = run_id_of(run)
    receipts = Receipts(workspace.state_dir / "runs" / run_id / "receipts.ndjson")
    wait_iteration(workspace.state_dir, run_id, coordinator, iteration)
    coordinator.send_signal(signal.SIGKILL)
    assert coordinator.wait(10) == -signal.SIGKILL
    return Killed(run_id, receipts, uninterrupted)


def resume_matches(workspace: Config, name: str, killed: Killed, samples: int,
                   iterations: int) -> None:
    """``runs resume NAME`` ends with the uninterrupted run's numbers, to the last bit."""
    resumed = cli(workspace, "runs", "resume", name, "--workers", "2", "--json")
    assert resumed.returncode == 0, resumed.stderr
    got = json.loads(resumed.stdout)
    ref = killed.reference
    assert (got["estimate"], got["error"], got["chi2_dof"], got["samples"], got["iterations"]) == \
        (ref.estimate, ref.error, ref.chi2_dof, samples, iterations)
