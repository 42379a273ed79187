"""How fast a command fails when what it needs is missing (issue 17), against the same
process's start: the bounds tests/ no longer assert on the wall clock.

Run from the repository root:

    .venv/bin/python bench/bench_fail_fast.py [--runs 3] [--json]

Each round, in fresh workspaces, times as a new `python -m mainboard` process:

- peer: `mainboard --version` (imports and exit: what any command costs);
- no fleet: `integrate run.toml --workers 0` on a workspace whose embedded broker is not
  running (exit 2 without starting one) and on one whose broker answers but has no worker
  consuming the batch queue (exit 2, "no worker consumes ...");
- broker down: `fleet status` and `integrate run.toml` with ``[broker] url`` on a port
  nobody listens on (exit 1, one line);
- resume refused: `runs resume` of a run another coordinator drives (exit 2, "is being
  coordinated by pid"), the coordinator a slow local run;
- up: Ctrl-C to exit: `mainboard up --workers 1` (embedded broker, Flower, dashboard, one
  worker) from SIGINT to its whole group until it exits 0, once it printed its URLs.

Prints each median, its ratio to the peer's, and issue 17's bounds (no fleet < 25 s,
broker down < 30 s, resume refused < 15 s; `up` stops within 10 s of Ctrl-C).
Exits 1 when a command does not exit with the code the CLI contract gives it.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.*

from tests.support.integration import slow_spec, subprocess_env, toml  # noqa: E402
from tests.support.outage import run_id_of, start, wait_iteration  # noqa: E402
from tests.support.services import free_port, start_redis  # noqa: E402

BOUNDS = {"no fleet (embedded)": 25.0, "no fleet (answering)": 25.0,
          "broker down: fleet status": 30.0, "broker down: integrate": 30.0,
          "resume refused": 15.0, "up: Ctrl-C to exit": 10.0}
RUN = toml(slow_spec(0.0, name="contract", stop={"max_samples": 20_000},
                     batching={"batch_size": 10_000, "batches_per_iteration": 1}))
DRIVEN = slow_spec(0.15, name="driven", stop={"max_samples": 600_000})


def workspace(root: Path, broker_url: str | None) -> Path:
    """A fresh workspace under ``root`` (run.toml beside it); its mainboard.toml."""
    ws = Path(tempfile.mkdtemp(dir=root))
    broker = f'[broker]\nurl = "{broker_url}"\n' if broker_url else ""
    (ws / "mainboard.toml").write_text(f'[workspace]\nname = "fast"\n{broker}')
    (ws / "run.toml").write_text(RUN)
    return ws / "mainboard.toml"


def timed(config: Path | None, args: list[str], code: int) -> float:
    """Wall seconds of one `mainboard` process; exit 1 when it exits other than ``code``."""
    head = ["--config", str(config)] if config else []
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mainboard", *head, *args], env=subprocess_env(),
                          cwd=config.parent if config else None, capture_output=True,
                          text=True, timeout=300)
    took = time.monotonic() - began
    if done.returncode != code:
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}, wanted {code}: "
                         f"{done.stderr.strip().splitlines()[-1:]}")
    return took


def resume_refused(root: Path, url: str) -> float:
    """`runs resume` while a slow run on one local worker is driven by another coordinator."""
    config = workspace(root, url)
    (config.parent / "driven.toml").write_text(toml(DRIVEN))
    proc = start(config.parent, "integrate", "driven.toml", "--workers", "1", "--json")
    try:
        wait_iteration(config.parent / ".mainboard", run_id_of(DRIVEN), proc)
        return timed(config, ["runs", "resume", run_id_of(DRIVEN)[:8], "--workers", "0"], 2)
    finally:
        proc.kill()
        proc.communicate()


def up_stop(root: Path) -> float:
    """Seconds from Ctrl-C (SIGINT to the group, as a terminal sends it) until `mainboard up`
    exits 0, in a fresh workspace on the embedded broker."""
    config = workspace(root, None)
    proc = subprocess.Popen([sys.executable, "-m", "mainboard", "up", "--json", "--workers", "1"],
                            cwd=config.parent, env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 300)
        if not (ready and proc.stdout and proc.stdout.readline()):
            raise SystemExit("`mainboard up` printed no URLs within 300 s")
        began = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(300)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if code != 0:
        raise SystemExit(f"`mainboard up` exited {code} after Ctrl-C, wanted 0")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mb-bench-fail-fast-"))
    redis = start_redis(root / "redis")
    seconds: dict[str, list[float]] = {"peer: --version": [], **{k: [] for k in BOUNDS}}
    try:
        for _ in range(args.runs):
            down = f"redis://127.0.0.1:{free_port()}/0"
            seconds["peer: --version"].append(timed(None, ["--version"], 0))
            seconds["no fleet (embedded)"].append(
                timed(workspace(root, None), ["integrate", "run.toml", "--workers", "0"], 2))
            seconds["no fleet (answering)"].append(
                timed(workspace(root, redis.url), ["integrate", "run.toml", "--workers", "0"], 2))
            seconds["broker down: fleet status"].append(
                timed(workspace(root, down), ["fleet", "status"], 1))
            seconds["broker down: integrate"].append(
                timed(workspace(root, down), ["integrate", "run.toml"], 1))
            seconds["resume refused"].append(resume_refused(root, redis.url))
            seconds["up: Ctrl-C to exit"].append(up_stop(root))
    finally:
        redis.stop()
    peer = statistics.median(seconds["peer: --version"])
    rows = {name: {"median_s": round(statistics.median(v), 3),
                   "x_peer": round(statistics.median(v) / peer, 2),
                   "bound_s": BOUNDS.get(name)} for name, v in seconds.items()}
    if args.json:
        print(json.dumps(rows))
        return
    for name, row in rows.items():
        bound = f"  (bound {row['bound_s']:.0f} s)" if row["bound_s"] else ""
        print(f"{name:28} {row['median_s']:7.2f} s  {row['x_peer']:6.2f}x peer{bound}")


if __name__ == "__main__":
    main()
