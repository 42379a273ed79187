"""Cost of a stage span on the hot path: what ``run_stage`` adds per stage, vs no span.

Run: ``.venv/bin/python bench/bench_spans.py [--n 200000] [--repeat 5]``. Each loop runs a
stage body N times, once bare and once wrapped exactly as ``mainboard.tasks.stages.run_stage``
wraps it (``telemetry.enter``, two clocks, ``telemetry.span``), while the shipper's thread
ships the spans to a real redis-server in the background (its GIL share is counted). Prints
best-of-repeat microseconds per span and the ratio to the bare loop; the target is at most
20 us per span. Two bodies: an empty one (the pure overhead) and a 1,000-point Gaussian
(a small real batch).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable

import numpy as np

from mainboard.tasks import telemetry

TARGET_US = 20.0


def _redis() -> tuple[subprocess.Popen[bytes] | None, str]:
    """A throwaway redis-server (or, without one, a closed port: flushes then fail fast)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = shutil.which("redis-server")
    if exe is None:
        return None, f"redis://127.0.0.1:{port}/0"
    proc = subprocess.Popen([exe, "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", tempfile.gettempdir()], stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    return proc, f"redis://127.0.0.1:{port}/0"


def bare(body: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        body()
    return time.perf_counter() - start


def with_spans(body: Callable[[], object], n: int, url: str) -> float:
    start = time.perf_counter()
    for i in range(n):
        ship = telemetry.enter(url, "bench@host", "benchrun", 1, i, "evaluate")
        began, clock = time.time(), time.perf_counter()
        body()
        telemetry.span(ship, "evaluate", "benchrun", 1, i, 1000, 0, began,
                       time.perf_counter() - clock)
    return time.perf_counter() - start


def main() -> None:
    """Print per-span cost and ratios for each body."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="stages per loop")
    parser.add_argument("--repeat", type=int, default=5, help="loops per variant (best kept)")
    args = parser.parse_args()
    proc, url = _redis()
    x = np.random.default_rng(1).random((1000, 4))
    bodies: dict[str, tuple[Callable[[], object], int]] = {
        "empty body": (lambda: None, args.n),
        "gauss 1000x4": (lambda: np.exp(-((x - 0.5) ** 2).sum(axis=1)), max(1, args.n // 20)),
    }
    try:
        telemetry.shipper(url, "bench@host")
        print(f"{'body':14}  {'bare us/stage':>13}  {'span us/stage':>13}  "
              f"{'cost us/span':>12}  {'ratio':>6}")
        worst = 0.0
        for name, (body, n) in bodies.items():
            b = min(bare(body, n) for _ in range(args.repeat)) / n * 1e6
            s = min(with_spans(body, n, url) for _ in range(args.repeat)) / n * 1e6
            worst = max(worst, s - b)
            print(f"{name:14}  {b:13.3f}  {s:13.3f}  {s - b:12.3f}  {s / b:6.2f}")
        print(f"worst span cost {worst:.2f} us (target <= {TARGET_US:.0f} us): "
              f"{'ok' if worst <= TARGET_US else 'OVER'}")
    finally:
        telemetry.shutdown()
        if proc is not None:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
