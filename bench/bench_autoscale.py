"""Scale-up latency: work queued -> first task running on a NEW allocation the fleet keeper
submitted for it, next to a worker started by hand (`fleet up --on local`) for the same task.

Run from the repository root:

    .venv/bin/python bench/bench_autoscale.py [--repeat 3] [--tick 0.5]

Local host only (the other kinds need the test services: SLURM with several CPUs,
loopback sshd, the simulated provider; see tests/test_fleet_autoscale.py for the recipe
and bench/bench_fleet.py for their launch parts). Prints the median of each and the
ratio autoscaled / by hand; the difference is the keeper's tick plus its look at the pool.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mainboard.config import load_config  # noqa: E402
from mainboard.fleet.autoscale import SCALE_TICK_ENV  # noqa: E402
from mainboard.fleet.workers import broker_route  # noqa: E402
from mainboard.services.broker import EmbeddedBroker  # noqa: E402
from mainboard.tasks.app import make_app  # noqa: E402
from mainboard.tasks.fleet import PROBE_TASK  # noqa: E402

POOL = '[fleet.pools.auto]\nhost = "local"\nqueues = ["bench.auto"]\nmax-jobs = 1\n' \
       'idle-timeout = 600\n'


def _cli(ws: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "mainboard", "--config", str(ws / "mainboard.toml"),
                    *args], cwd=ws, check=True, capture_output=True, text=True)


def _first_task(ws: Path, queue: str, start: list[str]) -> float:
    """Seconds from queueing one probe (then running ``start``) to its result."""
    route = broker_route(load_config(ws / "mainboard.toml"), start=False)
    assert route is not None
    app = make_app(broker_url=route.url)
    began = time.perf_counter()
    result = app.send_task(PROBE_TASK, kwargs={}, queue=queue)
    if start:
        _cli(ws, *start)
    result.get(timeout=300)
    took = time.perf_counter() - began
    app.close()
    return took


def once(base: Path, tick: float) -> tuple[float, float]:
    ws = Path(tempfile.mkdtemp(dir=base))
    (ws / "mainboard.toml").write_text(POOL)
    try:
        _cli(ws, "broker", "up")
        hand = _first_task(ws, "bench.hand", ["fleet", "up", "--on", "local", "--queues",
                                              "bench.hand", "--no-flower"])
        _cli(ws, "fleet", "down")
        _cli(ws, "fleet", "up", "--pool", "auto", "--no-flower")  # starts nothing: no work
        auto = _first_task(ws, "bench.auto", [])
        return auto, hand
    finally:
        subprocess.run([sys.executable, "-m", "mainboard", "--config",
                        str(ws / "mainboard.toml"), "fleet", "down"], cwd=ws,
                       capture_output=True)
        EmbeddedBroker(ws / ".mainboard").down()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tick", type=float, default=0.5, help="the keeper's look interval")
    args = parser.parse_args()
    os.environ[SCALE_TICK_ENV] = str(args.tick)
    with tempfile.TemporaryDirectory() as base:
        runs = [once(Path(base), args.tick) for _ in range(args.repeat)]
    auto = statistics.median(a for a, _ in runs)
    hand = statistics.median(h for _, h in runs)
    print(f"local: work queued -> first task done on a new allocation: autoscaled "
          f"{auto:.2f} s, by hand {hand:.2f} s, ratio {auto / hand:.2f} "
          f"(keeper tick {args.tick:g} s, median of {args.repeat})")


if __name__ == "__main__":
    main()
