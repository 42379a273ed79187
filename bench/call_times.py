"""Whole-call and iteration times of 2k- and 200k-sample runs, one warm fleet for all calls:
a lighter alternation than ``bench/overhead.py`` (no peer, no second pipeline setting).

``--checkout`` names the checkout whose ``bench/`` helpers to use, so a "before" venv runs
its own code with this script (``/tmp/base/.venv/bin/python bench/call_times.py
--checkout /tmp/base``); alternate the two by hand, the machine being shared.

    .venv/bin/python bench/call_times.py [--calls 6] [--checkout .]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=6, help="rounds of 2k, 2k, 200k calls")
    parser.add_argument("--checkout", default=str(Path(__file__).resolve().parent.parent))
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.checkout).resolve() / "bench"))
    from bench_integrate import bench_workspace, start_fleet
    from overhead import spec

    import mainboard

    runs = {"2k": (2_000, spec(2_000, 800_000, fuse=True)),
            "200k": (200_000, spec(200_000, 8_000_000, fuse=True))}
    times: dict[str, list[tuple[float, float, int]]] = {"2k": [], "200k": []}
    with bench_workspace("calls") as (config, url, root):
        fleet = start_fleet(2, url, root / "logs")
        try:
            mainboard.integrate(spec(10_000, 400_000, fuse=True), workers=0, config=config)
            for _ in range(args.calls):
                for name in ("2k", "2k", "200k"):
                    began = time.perf_counter()
                    res = mainboard.integrate(runs[name][1], workers=0, config=config)
                    times[name].append((time.perf_counter() - began, res.wall_s, res.samples))
        finally:
            fleet.stop()
    for name, rows in times.items():
        size, n = runs[name][0], rows[0][2]
        walls, loops = sorted(w for w, _, _ in rows), sorted(loop for _, loop, _ in rows)
        mid = statistics.median(walls)
        print(f"{name}: whole call best {walls[0]:.3f} s, median {mid:.3f} s (best "
              f"{n / walls[0] / size:,.0f} batches/s, {n / walls[0]:,.0f} samples/s; median "
              f"{n / mid / size:,.0f} batches/s); iterations best {loops[0]:.3f} s")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
