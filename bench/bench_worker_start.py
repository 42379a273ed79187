"""A worker's start: mainboard's worker command against the hand-started Celery worker.

    .venv/bin/python bench/bench_worker_start.py [--runs 5]

Each round starts, on a private redis-server, one worker as a user starts it by hand
(``python -m celery -A mainboard.tasks.app worker ...``, the peer) and one with mainboard's
own command line (``tasks.workers.worker_command``: ``python -m mainboard.tasks.worker_main``,
the same options), and the same mainboard worker with its start-up's garbage-collector
hold turned off (``MAINBOARD_GC_HOLD=0``: the code before it), in turn, each until its log
says ``ready``, then stops it (warm shutdown) and takes the CPU it and its pool child used
in their whole life. Prints the medians and the ratios to the worker by hand.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mainboard.names import GC_HOLD_ENV  # noqa: E402
from mainboard.tasks.workers import worker_command, worker_env  # noqa: E402
from tests.support.services import start_redis  # noqa: E402


def by_hand(node: str) -> list[str]:
    """The peer: Celery's own program, with the options mainboard's command passes."""
    ours = worker_command(node)
    return [sys.executable, "-m", "celery", "-A", "mainboard.tasks.app", "worker", *ours[3:]]


def one(argv: list[str], env: dict[str, str], log: Path) -> tuple[float, float]:
    """(seconds to `ready`, CPU seconds of the worker's whole life)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    while b" ready." not in log.read_bytes():
        if proc.poll() is not None:
            raise SystemExit(f"worker exited {proc.returncode}: {log.read_text()[-2000:]}")
        time.sleep(0.01)
    ready = time.monotonic() - began
    proc.terminate()
    proc.wait(30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ready, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="mb-bench-worker-"))
    server = start_redis(folder / "redis")
    env = worker_env(server.url)
    no_hold = {**env, GC_HOLD_ENV: "0"}
    got: dict[str, list[tuple[float, float]]] = {"by hand": [], "mainboard": [],
                                                 "no gc hold": []}
    try:
        for i in range(args.runs):
            got["by hand"].append(one(by_hand(f"hand{i}@%h"), env, folder / f"hand{i}.log"))
            got["mainboard"].append(one(worker_command(f"mb{i}@%h"), env, folder / f"mb{i}.log"))
            got["no gc hold"].append(one(worker_command(f"nh{i}@%h"), no_hold,
                                         folder / f"nh{i}.log"))
    finally:
        server.stop()
    load = os.getloadavg()[0]
    med = {k: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v))
           for k, v in got.items()}
    print(f"worker start, {args.runs} rounds, load {load:.1f} (medians)")
    for name, (ready, cpu) in med.items():
        print(f"  {name:10s} ready {ready:.3f} s   CPU of its life {cpu:.3f} s")
    hand = med["by hand"]
    for name in ("mainboard", "no gc hold"):
        ours = med[name]
        print(f"  ratio {name} / by hand: ready {ours[0] / hand[0]:.2f}x, "
              f"CPU {ours[1] / hand[1]:.2f}x")


if __name__ == "__main__":
    main()
