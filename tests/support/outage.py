"""Runs that outlive their broker: the run, its undisturbed numbers, the real CLI started on
it and the receipt to wait for. Shared by the broker tests (a restart, a Sentinel failover)
and ``bench/bench_failover.py``; not a test module, so a benchmark imports no tests.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from mainboard.integrators.driver import RunResult, integrate_local
from mainboard.receipts import IterationDone, Receipts
from mainboard.tasks.runner import load_spec
from tests.support.cliserver import popen_mainboard
from tests.support.integration import slow_spec, spec, subprocess_env

DELAY = 0.15
RUN = slow_spec(DELAY, name="outage", stop={"max_samples": 200_000})
# A module of the workspace: a fleet worker on another host imports it from its copy of
# the workspace (the repository's tests package is not there); the same function as
# tests.support.run_integrands, so the numbers are those of the same run with that target.
WORKSPACE_MODULE = "failover_integrands"
SOURCE = Path(__file__).with_name("run_integrands.py")
# The failover runs with a fleet worker: 8 iterations of 6 batches, so the ssh worker gets a
# share of several iterations after the failover.
FLEET_TABLES: dict[str, Any] = {"batching": {"batch_size": 5_000, "batches_per_iteration": 6},
                                "stop": {"max_samples": 240_000}}
FLEET_SHAPE = (240_000, 8)  # samples, iterations


def reference(run: dict[str, Any]) -> RunResult:
    """The run's numbers, in-process, without the sleep (the delay changes no value)."""
    params = {**run["integrand"]["params"], "delay": 0.0}
    integrand = {**run["integrand"], "params": params,
                 "target": run["integrand"]["target"].replace(WORKSPACE_MODULE,
                                                              "tests.support.run_integrands")}
    return integrate_local({**run, "integrand": integrand})


def workspace_run(ws: Path, **tables: Any) -> dict[str, Any]:
    """``RUN`` (with ``tables`` merged in) on the workspace's own copy of the integrand
    module, which ``mainboard.integrate`` mirrors to every fleet host before the run."""
    shutil.copyfile(SOURCE, ws / f"{WORKSPACE_MODULE}.py")
    integrand = {**RUN["integrand"], "target": f"{WORKSPACE_MODULE}:slow_gauss"}
    return spec(RUN, integrand=integrand, **tables)


def sentinel_broker(entries: list[str], master: str) -> str:
    """The ``[broker]`` table of a workspace on a Sentinel-managed set (WAIT for one replica
    after a counted write, a minute to ride out an outage)."""
    listed = ", ".join(f'"{e}"' for e in entries)
    return (f'[broker]\nsentinels = [{listed}]\nmaster = "{master}"\nmin_replicas = 1\n'
            'outage = "60s"\n')


def start(ws: Path, *args: str) -> subprocess.Popen[str]:
    """``mainboard ARGS`` in the workspace, in a new process (stdout and stderr piped)."""
    return popen_mainboard(["--config",
                            str(ws / "mainboard.toml"), *args], cwd=ws, env=subprocess_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_id_of(run: dict[str, Any]) -> str:
    return load_spec(run).run_id()


def wait_iteration(state_dir: Path, run_id: str, proc: subprocess.Popen[str],
                   iteration: int = 1) -> None:
    """Until the run's receipts record ``iteration`` (the run must stay alive meanwhile)."""
    receipts = Receipts(state_dir / "runs" / run_id / "receipts.ndjson")
    deadline = time.monotonic() + 120
    while not any(isinstance(p, IterationDone) and p.iteration == iteration
                  for p in receipts.read()):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"no iteration {iteration} within 120 s"
        time.sleep(0.05)


def numbers(out: dict[str, Any]) -> tuple[Any, ...]:
    return out["estimate"], out["error"], out["samples"], out["iterations"]


def stderr_until(proc: subprocess.Popen[str], text: str) -> str:
    """``proc``'s stderr up to and including the first line holding ``text``: the event a
    test waits for (ended by the process's exit when it never comes)."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} never on stderr (exit {proc.wait()}): {''.join(seen)[-2000:]}")
