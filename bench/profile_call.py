"""Where one whole ``mainboard.integrate`` call spends its time: cProfile of the call after
two warm ones (the 4-d gaussian of ``bench/overhead.py``, 2 local warm workers).

Prints the two warm calls' wall times beside the run's own ``wall_s``, then the profile of
the third call, by cumulative time, restricted to mainboard's coordinator, runner and
receipt code (``--all`` for everything). Profiling slows the call; compare the rows with
each other, not with the unprofiled calls.

    .venv/bin/python bench/profile_call.py [--size 2000] [--samples 800000] [--all]
    .venv/bin/python bench/profile_call.py --gauss 4e7    # bench_floor.py's 8-d VEGAS run
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from bench_integrate import bench_workspace, gauss_spec, start_fleet  # noqa: E402
from overhead import spec  # noqa: E402

import mainboard  # noqa: E402

FOCUS = "tasks/|runs/store|receipts|appends|workers.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2_000)
    parser.add_argument("--samples", type=int, default=800_000)
    parser.add_argument("--all", action="store_true", help="every function, not mainboard's")
    parser.add_argument("--gauss", type=float, default=0.0, metavar="BUDGET",
                        help="the 8-d gaussian of bench_floor.py (VEGAS, 10 iterations of 10 "
                             "batches) with this many samples instead")
    parser.add_argument("--callees", metavar="PATTERN",
                        help="also what the functions matching PATTERN call, e.g. _record")
    args = parser.parse_args()
    run = gauss_spec(int(args.gauss), name="profile-gauss") if args.gauss else \
        spec(args.size, args.samples, fuse=True)
    with bench_workspace("profile") as (config, url, root):
        fleet = start_fleet(2, url, root / "logs")
        try:
            for _ in range(2):
                began = time.perf_counter()
                res = mainboard.integrate(run, workers=0, config=config)
                print(f"whole call {time.perf_counter() - began:.3f} s, iterations "
                      f"{res.wall_s:.3f} s, {res.samples:,} samples")
            profile = cProfile.Profile()
            profile.enable()
            mainboard.integrate(run, workers=0, config=config)
            profile.disable()
        finally:
            fleet.stop()
    stats = pstats.Stats(profile).sort_stats("cumulative")
    if args.all:
        stats.print_stats(60)
    else:
        stats.print_stats(FOCUS, 40)
    if args.callees:
        stats.sort_stats("cumulative").print_callees(args.callees)


if __name__ == "__main__":
    main()
