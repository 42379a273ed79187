"""The coordinator's send-ahead policies alternated call by call in one process on one warm
fleet, 2k-sample batches: iterations sent ahead (``pipeline.DEPTH``: 1 or 2) and whether
an iteration sent ahead is cut for half the worker slots (``overlapping``).

Why in one process: the machine is shared, and policies measured in separate runs differ by
the load more than by themselves; here every policy meets the same load within seconds.

    .venv/bin/python bench/ahead_policy.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from bench_integrate import bench_workspace, start_fleet  # noqa: E402
from overhead import spec  # noqa: E402

import mainboard  # noqa: E402
from mainboard.tasks import dispatch, pipeline  # noqa: E402

POLICIES = [(1, False), (2, True), (1, True), (2, False)]  # (DEPTH, cut for the overlap)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cut = {"on": True}
    plan = dispatch.Dispatch.plan

    def plan_as_told(self: Any, pending: Any, workers: int = 0, overlapping: int = 1) -> Any:
        return plan(self, pending, workers, overlapping if cut["on"] else 1)

    dispatch.Dispatch.plan = plan_as_told  # type: ignore[method-assign]
    run = spec(2_000, 800_000, fuse=True)
    times: dict[tuple[int, bool], list[tuple[float, float]]] = {p: [] for p in POLICIES}
    with bench_workspace("policy") as (config, url, root):
        fleet = start_fleet(2, url, root / "logs")
        try:
            mainboard.integrate(spec(10_000, 400_000, fuse=True), workers=0, config=config)
            for _ in range(args.rounds):
                for policy in POLICIES:
                    pipeline.DEPTH, cut["on"] = policy
                    began = time.perf_counter()
                    res = mainboard.integrate(run, workers=0, config=config)
                    times[policy].append((time.perf_counter() - began, res.wall_s))
        finally:
            fleet.stop()
    batches = 400
    for (depth, overlap), rows in times.items():
        walls, loops = [w for w, _ in rows], [loop for _, loop in rows]
        print(f"ahead {depth}, cut for the overlap {'yes' if overlap else 'no ':>3}: whole call "
              f"best {batches / min(walls):,.0f}, median {batches / statistics.median(walls):,.0f}"
              f" batches/s; iterations best {batches / min(loops):,.0f}, median "
              f"{batches / statistics.median(loops):,.0f}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
