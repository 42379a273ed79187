"""Scheduler commands per tick with many fleet workers on one SLURM cluster (issue 29).

A real single-node SLURM and Redis (tests/support/services.py), ``JOBS`` held jobs submitted
through counting wrappers for squeue/sbatch/scontrol, then one tick of ``WORKERS`` fleet
workers asking their allocation's end: before (each asks squeue for its own job) and after
(the cluster's one shared listing, tasks/schedpoll.py). Counts, not times.

    .venv/bin/python bench/bench_sched_poll.py [--workers 50] [--jobs 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.sched_counting import counting_path, counts, one_by_one, workers_tick  # noqa: E402
from tests.support.services import start_redis, start_slurm  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        cluster, server = start_slurm(base / "slurm"), start_redis(base / "redis")
        log = base / "calls"
        os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
        os.environ["PATH"] = counting_path(base / "bin", log, os.environ["PATH"])
        try:
            ids = [subprocess.run(["sbatch", "--parsable", "--hold", "-t", "5", "--wrap",
                                   "true"], capture_output=True, text=True,
                                  check=True).stdout.strip() for _ in range(args.jobs)]
            mark = counts(log)["squeue"]
            one_by_one(ids[:args.workers])
            before = counts(log)["squeue"] - mark
            mark = counts(log)["squeue"]
            workers_tick(server.url, "ends:bench", args.workers, 60.0)
            after = counts(log)["squeue"] - mark
            submitted = counts(log)["sbatch"]
        finally:
            subprocess.run(["scancel", "--user", str(os.getuid())], check=False)
            server.stop()
            cluster.stop()
    report = {"workers": args.workers, "jobs": args.jobs, "sbatch": submitted,
              "squeue_per_tick_before": before, "squeue_per_tick_after": after}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{args.workers} workers, {args.jobs} jobs on one SLURM cluster: squeue per "
              f"tick {before} before, {after} after (sbatch calls: {report['sbatch']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
