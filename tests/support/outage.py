"""A slow run the broker outage and failover tests disturb, and how they watch it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mainboard.integrators.driver import RunResult, integrate_local
from mainboard.receipts import IterationDone, Receipts
from mainboard.tasks.runner import load_spec
from tests.support.integration import slow_spec, subprocess_env

DELAY = 0.15


RUN = slow_spec(DELAY, name="outage", stop={"max_samples": 200_000})


def reference(run: dict[str, Any]) -> RunResult:
    """The run's numbers, in-process, without the sleep (the delay changes no value)."""
    params = {**run["integrand"]["params"], "delay": 0.0}
    return integrate_local({**run, "integrand": {**run["integrand"], "params": params}})


def start(ws: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "mainboard", "--config",
                             str(ws / "mainboard.toml"), *args], cwd=ws, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_id_of(run: dict[str, Any]) -> str:
    return load_spec(run).run_id()


def wait_iteration(state_dir: Path, run_id: str, proc: subprocess.Popen[str],
                   iteration: int = 1) -> None:
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
